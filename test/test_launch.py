"""Launch files: statically checked always; evaluated with launch_ros where it is installed
(the real `ros2 launch` runs are in test/ros/test_launch_system.py)."""

import ast
import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from diffusion_policy_ros.config import CONFIG_DIR

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_FILES = sorted((ROOT / "launch").glob("*.launch.py"))
OUR_EXECUTABLES = set(re.findall(r'"(\w+) = diffusion_policy_ros', (ROOT / "setup.py").read_text()))
OTHER_PACKAGES = {"robot_state_publisher": {"robot_state_publisher"}, "rviz2": {"rviz2"}}
CONTRACT_TOPICS = {"camera/rgb/image_raw", "camera/rgb/camera_info",
                   "camera/depth_to_rgb/image_raw", "observation/image", "observation/points",
                   "instruction", "joint_states", "policy/action_chunk",
                   "arm_controller/commands", "gripper_controller/commands"}


def _calls(tree, name):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, "id", getattr(n.func, "attr", None)) == name]


def _kw(call, key):
    return next((k.value for k in call.keywords if k.arg == key), None)


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_statically(path):
    tree = ast.parse(path.read_text())
    nodes = _calls(tree, "Node")
    assert nodes, "a launch file without nodes"
    for node in nodes:
        package, executable = _kw(node, "package"), _kw(node, "executable")
        pkg = getattr(package, "id", None) == "PACKAGE" or \
            getattr(package, "value", None) == "diffusion_policy_ros"
        exe = executable.value
        if pkg:
            assert exe in OUR_EXECUTABLES, f"{exe} is not a console_script of ours"
        else:
            assert exe in OTHER_PACKAGES[package.value], exe
        remaps = _kw(node, "remappings")
        if remaps is not None:
            for pair in remaps.elts:
                assert pair.elts[1].value in CONTRACT_TOPICS, pair.elts[1].value
    for arg in _calls(tree, "DeclareLaunchArgument"):
        description = _kw(arg, "description")
        assert description is not None, f"{arg.args[0].value} has no description"
    for filename in re.findall(r'"(\w+\.(?:yaml|rviz))"', path.read_text()):
        assert (CONFIG_DIR / filename).is_file(), filename
        if filename.endswith(".yaml") and filename != "train.yaml":
            doc = yaml.safe_load((CONFIG_DIR / filename).read_text())
            assert any("ros__parameters" in v for v in doc.values()), filename


requires_launch = pytest.mark.skipif(
    importlib.util.find_spec("launch_ros") is None,
    reason="launch / launch_ros are not installed (PyPI has neither): scripts/setup.sh "
    "installs them from ../shared/ros2-tools where that folder exists; a ROS 2 install "
    "provides them too")


def _installed(package: str) -> bool:
    from ament_index_python.packages import PackageNotFoundError, get_package_prefix

    try:
        get_package_prefix(package)
    except PackageNotFoundError:
        return False
    return True


def _load(path):
    spec = importlib.util.spec_from_file_location(path.stem.replace(".", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate_launch_description()


@pytest.fixture
def installed(colcon_install, monkeypatch):
    """The launch files find the package through the ament index of the colcon build."""
    monkeypatch.setenv("AMENT_PREFIX_PATH", os.pathsep.join([str(colcon_install.prefix),
                                                             sys.prefix]))
    return colcon_install


def _evaluate(description, **arguments):
    """Visit the description with ``arguments`` as `ros2 launch ... name:=value` would give
    them; returns the actions its OpaqueFunction produces (nothing is started)."""
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, OpaqueFunction

    context = LaunchContext()
    context.launch_configurations.update(arguments)
    produced = []
    for entity in description.entities:
        if isinstance(entity, DeclareLaunchArgument):
            entity.visit(context)
        elif isinstance(entity, OpaqueFunction):
            produced += entity.visit(context) or []
    return produced


@requires_launch
@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_generate_launch_description(path, installed):
    assert _load(path).entities


def _given_parameters(node) -> dict:
    """The parameters a launch_ros Node sets besides its parameter files, evaluated."""
    from launch import LaunchContext
    from launch_ros.utilities import evaluate_parameters

    given = {}
    for entry in evaluate_parameters(LaunchContext(), node._Node__parameters):
        if isinstance(entry, dict):
            given.update(entry)
    return given


@requires_launch
def test_grasp_launch_arguments_are_typed_and_checked_before_any_node(installed):
    from launch_ros.actions import Node

    from diffusion_policy_ros.launch_support import LaunchArgumentError

    description = _load(ROOT / "launch/grasp.launch.py")
    nodes = _evaluate(description, real_time_factor="1", use_sim_time="True",
                      num_inference_steps="4")
    assert [n.node_executable for n in nodes if isinstance(n, Node)] == [
        "sim_node", "rgbd_sync_node", "policy_node", "pd_tracker_node"]
    # rate_hz sets the policy's rate and the sync node's observation rate alike.
    params = {n.node_executable: _given_parameters(n) for n in _evaluate(
        description, rate_hz="15", tick_source="timer") if isinstance(n, Node)}
    assert params["rgbd_sync_node"]["output_rate_hz"] == 15.0
    assert (params["policy_node"]["rate_hz"], params["policy_node"]["tick_source"]) == (
        15.0, "timer")
    assert "output_rate_hz" not in _given_parameters(next(
        n for n in _evaluate(description) if getattr(n, "node_executable", "") ==
        "rgbd_sync_node"))  # the parameter file's (the policy file's rate)
    # rviz:=true where rviz2 is missing: a warning, the nodes without it (no abort).
    with_rviz = [n for n in _evaluate(description, use_sim="false", rviz="true")
                 if isinstance(n, Node)]
    rviz_here = all(_installed(p) for p in ("rviz2", "robot_state_publisher"))
    assert len(with_rviz) == 3 + 2 * rviz_here
    for bad, message in (({"real_time_factor": "fast"}, "real_time_factor:=fast: parameter "
                          "'real_time_factor' must be a number, got 'fast'"),
                         ({"real_time_factor": "0"}, "is below its minimum 0.05"),
                         ({"num_inference_steps": "2.5"}, "must be an integer"),
                         ({"device": "tpu"}, "must be one of"),
                         ({"use_sim_time": "maybe"}, "use_sim_time:=maybe: expected true or "
                          "false"),
                         ({"params_file": "/nonexistent.yaml"}, "params_file:=/nonexistent.yaml: "
                          "cannot be read")):
        with pytest.raises(LaunchArgumentError, match=re.escape(message)):
            _evaluate(description, **bad)


def test_typed_parameters_convert_like_the_node_would_accept():
    from diffusion_policy_ros.launch_support import parse_bool, typed_parameters
    from diffusion_policy_ros.policy.node_config import PolicyNodeConfig
    from diffusion_policy_ros.sim.sim_config import SimConfig

    for text in ("1", "1.0"):
        value = typed_parameters(SimConfig, {"real_time_factor": text})["real_time_factor"]
        assert value == 1.0 and isinstance(value, float)
    assert typed_parameters(SimConfig, {"real_time_factor": "", "seed": "7"}) == {"seed": 7}
    assert typed_parameters(PolicyNodeConfig, {"checkpoint": "/a/b", "device": "cpu"}) == {
        "checkpoint": "/a/b", "device": "cpu"}
    assert parse_bool("x", "True") and not parse_bool("x", "0")


def _layers(node) -> list:
    from launch import LaunchContext
    from launch_ros.utilities import evaluate_parameters

    return [entry if isinstance(entry, dict) else str(entry)
            for entry in evaluate_parameters(LaunchContext(), node._Node__parameters)]


@requires_launch
@pytest.mark.parametrize("name", ["grasp.launch.py", "sim.launch.py", "rgbd_sync.launch.py"])
def test_a_params_file_overrides_the_shipped_files_and_the_defaults_not_given_arguments(
        installed, tmp_path, name):
    from launch_ros.actions import Node

    from diffusion_policy_ros.launch_support import LaunchArgumentError

    mine = tmp_path / "mine.yaml"
    mine.write_text("/**/policy_node:\n  ros__parameters:\n    device: cuda\n")
    given = {"params_file": str(mine), "use_sim_time": "true"}
    nodes = [n for n in _evaluate(_load(ROOT / "launch" / name), **given) if isinstance(n, Node)]
    clock = {"use_sim_time", "publish_clock"}  # what use_sim_time sets (sim_node: both)
    for node in nodes:
        layers = _layers(node)
        at = layers.index(str(mine))
        assert at > 0 and layers[0].endswith(".yaml")  # the shipped file first
        assert clock & set(layers[at + 1])  # a given argument: after the user's file
        assert not any(clock & set(layer) for layer in layers[:at] if isinstance(layer, dict))
    if name == "grasp.launch.py":
        policy = _layers(next(n for n in nodes if n.node_executable == "policy_node"))
        at = policy.index(str(mine))
        # Arguments left at their defaults (the shipped checkpoint, device auto) and the
        # launch file's own autostart: before the user's file, which overrides them, in a
        # file under the shipped files' key (rcl lets a later key win over a file's order).
        defaults = yaml.safe_load(Path(policy[at - 1]).read_text())
        assert {"checkpoint", "device", "autostart"} <= set(
            defaults["/**/policy_node"]["ros__parameters"])
        assert "device" in _layers(next(n for n in _evaluate(
            _load(ROOT / "launch" / name), params_file=str(mine), device="cpu")
            if getattr(n, "node_executable", "") == "policy_node"))[-1]
    (tmp_path / "bad.yaml").write_text("device: cuda\n")
    with pytest.raises(LaunchArgumentError, match="is not a ROS 2 parameter file"):
        _evaluate(_load(ROOT / "launch" / name), params_file=str(tmp_path / "bad.yaml"))
