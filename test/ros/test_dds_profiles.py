"""The package's Fast DDS profiles (config/fastdds_profiles.xml): every process that starts
ROS points Fast DDS at them (written for its namespace and remaps) unless the user chose
a file, Fast DDS loads them without complaint, a reader they move to UDP loopback
still gets a local writer's samples, and the camera topics repair lost fragments at once."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from rclpy.qos import QoSProfile
from sensor_msgs.msg import JointState

from diffusion_policy_ros.ros import node_main
from diffusion_policy_ros.ros.dds_profiles import (
    PROFILES_ENV,
    PROFILES_FILE,
    camera_topic_names,
    control_topic_names,
    namespace_and_remaps,
    profiles_xml,
    use_package_dds_profiles,
)

NS = {"dds": "http://www.eprosima.com"}
#: The control loop's topics as the nodes name them without a namespace: what sim_node /
#: a real arm driver, the tracker and the policy publish from their loops (log messages
#: included), and the clock and diagnostics every node reads.
CONTROL_TOPICS = {"/joint_states", "/arm_controller/commands", "/gripper_controller/commands",
                  "/policy/action_chunk", "/tracker/reference", "/clock", "/diagnostics",
                  "/rosout"}
CAMERA_TOPICS = {"/camera/rgb/image_raw", "/camera/depth_to_rgb/image_raw"}


def _readers(root) -> dict[str, list[tuple[str, str]]]:
    """profile name -> [(locator kind, address)] of each data_reader profile with locators."""
    readers = {r.get("profile_name"): [(loc.tag.split("}")[1],
                                        loc.findtext("dds:address", namespaces=NS))
                                       for loc in r.findall(
                                           "dds:unicastLocatorList/dds:locator/*", NS)]
               for r in root.findall("dds:profiles/dds:data_reader", NS)}
    return {name: locators for name, locators in readers.items() if locators}


def _times(root, kind: str) -> dict[str, dict[str, tuple[str, str]]]:
    """profile name -> {time setting: (sec, nanosec)} of each ``kind`` profile with times."""
    out = {}
    for profile in root.findall(f"dds:profiles/dds:{kind}", NS):
        times = profile.find("dds:times", NS)
        if times is not None:
            out[profile.get("profile_name")] = {
                t.tag.split("}")[1]: (t.findtext("dds:sec", namespaces=NS),
                                      t.findtext("dds:nanosec", namespaces=NS))
                for t in times}
    return out

RECEIVER = """
import rclpy
from sensor_msgs.msg import JointState
from diffusion_policy_ros.ros.dds_profiles import use_package_dds_profiles
print("profiles", use_package_dds_profiles(), flush=True)
rclpy.init()
node = rclpy.create_node("profile_reader")
got = []
node.create_subscription(JointState, "joint_states", got.append, 10)
while not got:
    rclpy.spin_once(node, timeout_sec=0.1)
print("received", got[0].name[0], flush=True)
"""


def test_the_package_file_is_used_unless_the_user_named_one(tmp_path):
    env = {}
    plain = ["sim_node", "--ros-args", "--params-file", "sim.yaml", "-p", "seed:=3"]
    assert use_package_dds_profiles(plain, env, tmp_path) == str(PROFILES_FILE)
    assert env[PROFILES_ENV] == str(PROFILES_FILE)
    assert use_package_dds_profiles([], {PROFILES_ENV: ""}, tmp_path) == str(PROFILES_FILE)
    mine = {PROFILES_ENV: "/etc/my_profiles.xml"}
    assert use_package_dds_profiles(["--ros-args", "-r", "__ns:=/cell1"], mine,
                                    tmp_path) == "/etc/my_profiles.xml"
    assert not list(tmp_path.iterdir())


def test_the_shipped_file_moves_every_control_topic_reader_to_udp_loopback_only():
    root = ET.parse(PROFILES_FILE).getroot()
    readers = _readers(root)
    assert set(readers) == CONTROL_TOPICS == set(control_topic_names([]))
    assert all(locators == [("udpv4", "127.0.0.1")] for locators in readers.values()), readers
    # Participants keep Fast DDS's (and rmw_fastrtps's) defaults; writer profiles exist
    # for the camera topics only.
    assert {child.tag.split("}")[1] for child in root.find("dds:profiles", NS)} == {
        "data_reader", "data_writer"}
    generated = ET.fromstring(profiles_xml(sorted(CONTROL_TOPICS), sorted(CAMERA_TOPICS)))
    assert _readers(generated) == readers
    for kind in ("data_reader", "data_writer"):
        assert _times(generated, kind) == _times(root, kind)


def test_the_camera_topics_repair_lost_fragments_without_delay():
    root = ET.parse(PROFILES_FILE).getroot()
    zero = ("0", "0")
    assert set(camera_topic_names([])) == CAMERA_TOPICS
    assert _times(root, "data_writer") == {
        name: {"nack_response_delay": zero} for name in CAMERA_TOPICS}
    assert _times(root, "data_reader") == {
        name: {"heartbeat_response_delay": zero} for name in CAMERA_TOPICS}
    # They keep shared memory: no locators of their own.
    assert not set(_readers(root)) & CAMERA_TOPICS


def test_namespace_and_remaps_give_the_names_the_readers_get(tmp_path):
    argv = ["pd_tracker_node", "--ros-args", "-p", "rate_hz:=500.0", "-r", "__ns:=cell1",
            "--remap", "pd_tracker_node:joint_states:=/arm/joint_states", "-r",
            "__node:=tracker", "--", "--ros-args", "-r", "policy/action_chunk:=chunks"]
    assert namespace_and_remaps(argv) == ("/cell1", {"joint_states": "/arm/joint_states",
                                                     "policy/action_chunk": "chunks"})
    names = control_topic_names(argv)
    assert names == sorted(["/arm/joint_states", "/cell1/arm_controller/commands",
                            "/cell1/gripper_controller/commands", "/cell1/chunks",
                            "/cell1/tracker/reference", "/clock", "/diagnostics", "/rosout"])
    assert control_topic_names(["--ros-args", "-r", "/cell2/joint_states:=states",
                                "-r", "__ns:=/cell2"])[3] == "/cell2/states"
    env = {}
    path = use_package_dds_profiles(argv, env, tmp_path)
    assert path == env[PROFILES_ENV] and path.startswith(str(tmp_path))
    written = ET.parse(path).getroot()
    assert sorted(_readers(written)) == names
    assert sorted(_times(written, "data_writer")) == camera_topic_names(argv) == [
        "/cell1/camera/depth_to_rgb/image_raw", "/cell1/camera/rgb/image_raw"]
    assert use_package_dds_profiles(argv, {}, tmp_path) == path  # same names, same file


def test_node_main_sets_the_profiles_for_its_arguments_before_rclpy_init(monkeypatch):
    monkeypatch.setenv(PROFILES_ENV, "")  # unset for run_node; restored afterwards
    seen = []

    class InitReached(Exception):
        pass

    def init(args=None):
        seen.append(os.environ.get(PROFILES_ENV))
        raise InitReached

    monkeypatch.setattr(node_main.rclpy, "init", init)
    with pytest.raises(InitReached):
        node_main.run_node(lambda: pytest.fail("no node without init"), "profile_test",
                           ["profile_test", "--ros-args", "-p", "x:=1"])
    assert seen == [str(PROFILES_FILE)]


def test_fast_dds_loads_the_profiles_and_a_udp_reader_receives(ros, tmp_path):
    """The reader process loads the package file (no XML parser error on its stderr,
    which a broken file does give) and receives this process's joint_states."""
    broken = tmp_path / "broken.xml"
    broken.write_text('<dds xmlns="http://www.eprosima.com"><profiles><data_reader>')
    check = subprocess.run([sys.executable, "-c", "import rclpy; rclpy.init(); "
                            "rclpy.create_node('broken_profiles')"],
                           env={**os.environ, PROFILES_ENV: str(broken)},
                           capture_output=True, text=True, timeout=60)
    assert "XMLPARSER" in check.stderr

    env = {k: v for k, v in os.environ.items() if k != PROFILES_ENV}
    reader = subprocess.Popen([sys.executable, "-c", RECEIVER], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pub = ros.node.create_publisher(JointState, "joint_states", QoSProfile(depth=10))
        ros.spin_until(lambda: pub.get_subscription_count() > 0 or reader.poll() is not None,
                       60.0, "the profile reader's subscription")
        msg = JointState(name=["joint_1"], position=[0.0])

        def published_and_received() -> bool:
            pub.publish(msg)
            return reader.poll() is not None

        ros.spin_until(published_and_received, 60.0, "the reader's exit on a received sample")
        out, err = reader.communicate(timeout=30)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.communicate()
    assert reader.returncode == 0, err
    assert out.splitlines() == [f"profiles {PROFILES_FILE}", "received joint_1"], (out, err)
    assert "XMLPARSER" not in err, err
