"""config/pd_tracker.yaml mirrors PdTrackerConfig's defaults and loads through config.py."""

import dataclasses

import yaml

from diffusion_policy_ros.config import (
    CONFIG_DIR,
    config_fields,
    load_config,
)
from diffusion_policy_ros.control import PdTrackerConfig

YAML = CONFIG_DIR / "pd_tracker.yaml"


def test_yaml_section_has_exactly_the_dataclass_defaults():
    doc = yaml.safe_load(YAML.read_text())
    params = doc["/**/pd_tracker_node"]["ros__parameters"]
    defaults = dataclasses.asdict(PdTrackerConfig())
    assert set(params) == {f.param_name for f in config_fields(PdTrackerConfig)}
    assert params == defaults


def test_load_config_equals_dataclass_defaults():
    assert load_config(PdTrackerConfig, YAML, "pd_tracker_node") == PdTrackerConfig()


def test_every_field_is_documented_with_range_or_choices():
    for field in config_fields(PdTrackerConfig):
        assert field.description, field.attr
        if field.type in (int, float):
            assert field.low is not None and field.high is not None, field.attr
        default = field.default
        if field.low is not None:
            values = default if isinstance(default, list) else [default]
            assert all(field.low <= v <= field.high for v in values), field.attr
        if field.choices:
            assert default in field.choices


def test_rate_range_and_ur5e_like_defaults():
    cfg = PdTrackerConfig()
    rate = next(f for f in config_fields(PdTrackerConfig) if f.attr == "rate_hz")
    assert rate.default == 500.0 and rate.high == 2000.0
    assert cfg.effort_limits == [150.0, 150.0, 150.0, 28.0, 28.0, 28.0]
    assert (cfg.gripper_min, cfg.gripper_max) == (0.0, 0.085)
    assert cfg.blend_strategy == "ensemble"
