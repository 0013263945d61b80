"""config/policy_node.yaml mirrors PolicyNodeConfig's defaults; choices match policy.devices."""

import pytest
import yaml

from diffusion_policy_ros.config import (
    CONFIG_DIR,
    ConfigError,
    config_fields,
    config_from_params,
    field_value,
    load_config,
    load_node_params,
)
from diffusion_policy_ros.policy.devices import DEVICES, PRECISIONS
from diffusion_policy_ros.policy.grasp_lift import GraspLiftConfig
from diffusion_policy_ros.policy.grasp_retry import GraspRetryConfig
from diffusion_policy_ros.policy.node_config import (
    BACKEND_CHOICES,
    DEVICE_CHOICES,
    PRECISION_CHOICES,
    PolicyNodeConfig,
)
from diffusion_policy_ros.policy.runtime_backends import BACKENDS

YAML = CONFIG_DIR / "policy_node.yaml"


def test_yaml_section_has_exactly_the_dataclass_defaults():
    params = load_node_params(YAML, "policy_node")  # nested sections as dotted names
    assert "grasp_retry" in yaml.safe_load(YAML.read_text())["/**/policy_node"]["ros__parameters"]
    defaults = PolicyNodeConfig()
    assert params == {f.param_name: field_value(defaults, f)
                      for f in config_fields(PolicyNodeConfig)}
    assert load_config(PolicyNodeConfig, YAML, "policy_node") == defaults
    assert defaults.grasp_retry == GraspRetryConfig()  # one set of defaults
    assert defaults.grasp_lift == GraspLiftConfig()


def test_defaults_follow_the_contract():
    cfg = PolicyNodeConfig()
    assert cfg.action_joint_names == ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5",
                                      "joint_6", "gripper_joint"]
    assert (cfg.rate_hz, cfg.num_threads, cfg.checkpoint, cfg.autostart) == (10.0, 1, "", False)


def test_choices_are_those_of_the_runtime():
    assert DEVICE_CHOICES == DEVICES
    assert set(PRECISION_CHOICES) == set(PRECISIONS)
    assert BACKEND_CHOICES == BACKENDS


def test_every_field_is_documented_with_range_or_choices():
    for field in config_fields(PolicyNodeConfig):
        assert field.description, field.attr
        if field.type in (int, float):
            assert field.low is not None and field.high is not None, field.attr
            assert field.low <= field.default <= field.high, field.attr


@pytest.mark.parametrize("params, match", [
    ({"device": "tpu"}, "device"),
    ({"precision": "int8"}, "precision"),
    ({"gripper_joint": "joint_3"}, "duplicates"),
    ({"rate_hz": 0.0}, "rate_hz"),
    ({"grasp_retry.empty_below_m": 0.09}, "empty_below_m"),
])
def test_bad_values_are_named(params, match):
    with pytest.raises(ConfigError, match=match):
        config_from_params(PolicyNodeConfig, params)


def test_reading_the_config_does_not_import_torch():
    """The module docstring's promise: launch-time code reads it without torch."""
    import subprocess
    import sys

    code = ("import sys; import diffusion_policy_ros.policy.node_config; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
