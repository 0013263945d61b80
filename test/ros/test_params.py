"""Config dataclasses declared as ROS parameters: integers for floats, clear errors, exit codes."""

import dataclasses
import subprocess
import sys
import time

import pytest
import rclpy
from rcl_interfaces.msg import ParameterType
from rclpy.exceptions import InvalidParameterValueException
from rclpy.parameter import Parameter

from diffusion_policy_ros.config import CONFIG_DIR, ConfigError, param
from diffusion_policy_ros.ros.params import declare_config


@dataclasses.dataclass
class Example:
    rate: float = param(1.0, "a float", low=0.05, high=20.0)
    gains: list = param([1.0, 2.0], "float list", low=0.0, high=10.0)
    count: int = param(3, "an int", low=0, high=10)
    name: str = param("a", "a string")


@pytest.fixture
def context():
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    yield ctx
    rclpy.shutdown(context=ctx)


def _declare(context, **overrides):
    node = rclpy.create_node("params_test", context=context, parameter_overrides=[
        Parameter(k, value=v) for k, v in overrides.items()])
    try:
        return declare_config(node, Example), node.describe_parameters(["rate", "gains"])
    finally:
        node.destroy_node()


def test_integers_for_float_parameters_become_floats_with_the_double_type(context):
    cfg, (rate, gains) = _declare(context, rate=1, gains=[3, 4])
    assert cfg.rate == 1.0 and isinstance(cfg.rate, float)
    assert cfg.gains == [3.0, 4.0] and all(isinstance(g, float) for g in cfg.gains)
    assert rate.type == ParameterType.PARAMETER_DOUBLE and rate.read_only
    assert rate.floating_point_range[0].to_value == 20.0
    assert gains.type == ParameterType.PARAMETER_DOUBLE_ARRAY


def test_floats_and_defaults_unchanged(context):
    assert _declare(context, rate=0.3)[0] == Example(rate=0.3)
    assert _declare(context)[0] == Example()


def test_wrong_types_and_ranges_name_the_parameter(context):
    with pytest.raises(ConfigError, match="'rate' must be a number, got 'fast'"):
        _declare(context, rate="fast")
    with pytest.raises(InvalidParameterValueException, match="rate"):
        _declare(context, rate=50)


@pytest.mark.ros
def test_node_takes_an_integer_for_a_float_and_a_bad_value_exits_with_one_line(start_node):
    """`ros2 run ... -p rate_hz:=500` used to die with InvalidParameterTypeException."""
    params = ["--params-file", str(CONFIG_DIR / "pd_tracker.yaml")]
    module = "diffusion_policy_ros.ros.pd_tracker_node"
    for override, message in (
            ("rate_hz:=fast", "pd_tracker_node: invalid parameters: parameter 'rate_hz' must "
                              "be a number, got 'fast'"),
            ("realtime_priority:=1.5", "pd_tracker_node: invalid parameters: Trying to set "
                                       "parameter 'realtime_priority' to '1.5'")):
        bad = subprocess.run([sys.executable, "-m", module, "--ros-args", *params, "-p", override],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2, bad.stdout + bad.stderr
        assert message in bad.stdout and "Traceback" not in bad.stdout + bad.stderr
    node = start_node(module, [*params, "-p", "rate_hz:=250", "-p", "realtime_priority:=0"])
    deadline = time.monotonic() + 60
    while "ready: 250 Hz" not in node.log():
        assert node.alive(), node.log()
        assert time.monotonic() < deadline, node.log()
        time.sleep(0.1)  # ok-sleep: poll interval of a deadline-bounded wait on the log
