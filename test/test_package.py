"""The package builds with colcon and installs what `ros2 run` / `ros2 launch` need."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from diffusion_policy_ros.config import load_node_params

ROOT = Path(__file__).resolve().parent.parent
EXECUTABLES = ["rgbd_sync_node", "pd_tracker_node", "sim_node", "policy_node", "dpr"]


@pytest.fixture(scope="module")
def colcon_install(tmp_path_factory):
    colcon = Path(sys.executable).parent / "colcon"
    if not colcon.exists():
        colcon = shutil.which("colcon")
    assert colcon, "colcon not found: run scripts/setup.sh"
    work = tmp_path_factory.mktemp("colcon")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               COLCON_HOME=str(work / "colcon_home"))
    result = subprocess.run(
        [str(colcon), "--log-base", str(work / "log"), "build", "--paths", str(ROOT),
         "--build-base", str(work / "build"), "--install-base", str(work / "install")],
        cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return work / "install" / "diffusion_policy_ros"


def test_ament_index_and_package_xml(colcon_install):
    share = colcon_install / "share"
    assert (share / "ament_index/resource_index/packages/diffusion_policy_ros").is_file()
    assert (share / "diffusion_policy_ros/package.xml").is_file()


def test_config_and_launch_files_installed(colcon_install):
    share = colcon_install / "share/diffusion_policy_ros"
    for name in os.listdir(ROOT / "config"):
        assert (share / "config" / name).is_file(), name
    for name in os.listdir(ROOT / "launch"):
        assert (share / "launch" / name).is_file(), name
    assert load_node_params(share / "config/rgbd_sync.yaml", "rgbd_sync_node")


def test_executables_where_ros2_run_finds_them(colcon_install):
    lib = colcon_install / "lib/diffusion_policy_ros"
    for name in EXECUTABLES:
        assert (lib / name).is_file() and os.access(lib / name, os.X_OK), name


def test_package_xml_declares_ros_dependencies_used_in_code():
    xml = (ROOT / "package.xml").read_text()
    used = set()
    for path in (ROOT / "diffusion_policy_ros").rglob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] in ("import", "from"):
                used.add(words[1].split(".")[0])
    ros_packages = {"rclpy", "std_msgs", "std_srvs", "sensor_msgs", "geometry_msgs",
                    "trajectory_msgs", "visualization_msgs", "diagnostic_msgs", "rosgraph_msgs",
                    "lifecycle_msgs", "builtin_interfaces", "rcl_interfaces"}
    for pkg in sorted(used & ros_packages):
        assert f"<exec_depend>{pkg}</exec_depend>" in xml, pkg
