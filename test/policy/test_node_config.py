"""config/policy_node.yaml mirrors PolicyNodeConfig's defaults (the chunk rules, off, are
config/grasp_rules.yaml's to turn on); choices match policy.devices."""

import pytest

from diffusion_policy_ros.acting.grasp_lift import GraspLiftConfig
from diffusion_policy_ros.acting.grasp_retry import GraspRetryConfig
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
from diffusion_policy_ros.policy.node_config import (
    BACKEND_CHOICES,
    DEVICE_CHOICES,
    PRECISION_CHOICES,
    PolicyNodeConfig,
)
from diffusion_policy_ros.policy.runtime_backends import BACKENDS

YAML = CONFIG_DIR / "policy_node.yaml"
RULES = ("grasp_retry.", "grasp_lift.")


def test_yaml_section_has_exactly_the_dataclass_defaults():
    params = load_node_params(YAML, "policy_node")  # nested sections as dotted names
    defaults = PolicyNodeConfig()
    assert params == {f.param_name: field_value(defaults, f)
                      for f in config_fields(PolicyNodeConfig)
                      if not f.param_name.startswith(RULES)}
    assert load_config(PolicyNodeConfig, YAML, "policy_node") == defaults
    assert defaults.grasp_retry == GraspRetryConfig()  # one set of defaults
    assert defaults.grasp_lift == GraspLiftConfig()
    assert not defaults.grasp_retry.enabled and not defaults.grasp_lift.enabled


def test_the_rules_file_on_top_turns_the_grasp_rules_on():
    """--params-file config/policy_node.yaml --params-file config/grasp_rules.yaml."""
    rules = load_node_params(CONFIG_DIR / "grasp_rules.yaml", "policy_node")
    assert rules and all(name.startswith(RULES) for name in rules)
    cfg = config_from_params(PolicyNodeConfig, {**load_node_params(YAML, "policy_node"),
                                                **rules})
    assert cfg.grasp_retry.enabled and cfg.grasp_lift.enabled
    assert cfg.grasp_retry.empty_below_m == rules["grasp_retry.empty_below_m"]


def test_a_rule_turned_on_without_its_thresholds_is_refused():
    with pytest.raises(ConfigError, match="grasp_retry.empty_below_m is not set"):
        config_from_params(PolicyNodeConfig, {"grasp_retry.enabled": True})


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
    ({"grasp_lift.enabled": True, "grasp_lift.wide_above_m": 0.053}, "tool_below_m"),
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
