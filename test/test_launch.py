"""Launch files: statically checked always; run through launch_ros where it is installed."""

import ast
import importlib.util
import re
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


@pytest.mark.skipif(importlib.util.find_spec("launch_ros") is None,
                    reason="launch / launch_ros are not installable from PyPI here")
@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_generate_launch_description(path):
    spec = importlib.util.spec_from_file_location(path.stem.replace(".", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.generate_launch_description().entities
