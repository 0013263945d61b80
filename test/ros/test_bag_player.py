"""dpr replay --publish: a bag played into ROS topics with /clock from the bag time."""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from diffusion_policy_ros.learning.episode_bag import BagError, EpisodeBagWriter
from diffusion_policy_ros.ros.bag_player import message_class

pytestmark = pytest.mark.ros
T0 = 7_000_000_000
JS_PERIOD = 10_000_000


def _write_bag(path):
    with EpisodeBagWriter(path) as w:
        w.instruction(T0, "pick up the red cube")
        for k in range(100):  # 1 s of joint states at 100 Hz
            t = T0 + k * JS_PERIOD
            w.joint_state(t, [0.01 * k] * 7, [0.0] * 7, [0.0] * 7)
            if k % 10 == 0:
                w.action_chunk(t, np.full((16, 7), 0.01 * k), 0.1)


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def test_publish_plays_raw_cdr_with_bag_clock(ros, tmp_path):
    _write_bag(tmp_path / "bag")
    got = {"joint_states": [], "chunks": [], "instruction": [], "clock": []}
    node = ros.node
    node.create_subscription(JointState, "joint_states",
                             lambda m: got["joint_states"].append(
                                 (_ns(m.header.stamp), got["clock"][-1] if got["clock"] else 0)),
                             QoSProfile(depth=200))
    node.create_subscription(JointTrajectory, "policy/action_chunk",
                             lambda m: got["chunks"].append(m), QoSProfile(depth=20))
    node.create_subscription(String, "instruction", lambda m: got["instruction"].append(m.data),
                             QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
    node.create_subscription(Clock, "/clock", lambda m: got["clock"].append(_ns(m.clock)),
                             QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
    log = open(tmp_path / "player.log", "w")  # noqa: SIM115 - closed below
    t_start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "diffusion_policy_ros.cli", "replay", "--bag",
         str(tmp_path / "bag"), "--publish", "--rate", "2", "--wait", "10",
         "--topics", "/joint_states", "policy/action_chunk", "instruction"],
        stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    try:
        ros.spin_until(lambda: proc.poll() is not None, 60.0, "the player to finish")
        wall = time.monotonic() - t_start
        ros.spin_until(lambda: len(got["joint_states"]) == 100, 5.0,
                       lambda: f"100 joint states (got {len(got['joint_states'])})")
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
        log.close()
    output = (tmp_path / "player.log").read_text()
    assert proc.returncode == 0, output
    assert "played 111 messages on 3 topics" in output
    assert got["instruction"] == ["pick up the red cube"]
    assert len(got["chunks"]) == 10 and len(got["chunks"][3].points) == 16
    stamps = [s for s, _ in got["joint_states"]]
    assert stamps == sorted(stamps) and stamps[0] == T0 and stamps[-1] == T0 + 99 * JS_PERIOD
    clock = got["clock"]
    assert clock == sorted(clock) and clock[-1] == T0 + 99 * JS_PERIOD and clock[0] >= T0
    played = re.search(r"([0-9.]+) s of bag in ([0-9.]+) s wall", output)
    assert float(played[1]) == pytest.approx(0.99)
    assert 0.99 / 2 * 0.95 < float(played[2]) < wall  # rate 2: half the bag's time


_FROZEN_SUBSCRIBER = """
import time
import rclpy
from rclpy.qos import QoSProfile
from sensor_msgs.msg import JointState
rclpy.init()
node = rclpy.create_node("frozen_subscriber")
node.create_subscription(JointState, "joint_states", lambda m: None, QoSProfile(depth=10))
def waiting_for_the_node():  # the player's GetState client: it has matched its subscribers
    try:
        clients = node.get_client_names_and_types_by_node("dpr_bag_player", "/")
    except Exception:  # not discovered yet
        return False
    return any(name == "/no_such_node/get_state" for name, _ in clients)
while not waiting_for_the_node():
    rclpy.spin_once(node, timeout_sec=0.05)
print("player waiting", flush=True)
rclpy.spin(node)
"""


@pytest.mark.slow
def test_the_first_message_waits_for_every_subscribers_acknowledgement(ros, tmp_path):
    """A matched reliable subscriber that cannot answer (a stopped process here; a
    subscriber whose side of discovery is late does not answer either) holds playback
    at the first message for up to --wait; the topic is reported, nothing is lost.

    The player matches the subscriber, then waits --wait for a lifecycle node that is
    not there; the subscriber is stopped once it sees the player asking for that node,
    well before the first message goes out."""
    _write_bag(tmp_path / "bag")
    frozen = subprocess.Popen([sys.executable, "-c", _FROZEN_SUBSCRIBER],
                              stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    player = None
    try:
        ros.spin_until(lambda: ros.node.count_subscribers("joint_states") >= 1, 60.0,
                       "the subscriber")
        t_start = time.monotonic()
        player = subprocess.Popen(
            [sys.executable, "-m", "diffusion_policy_ros.cli", "replay", "--bag",
             str(tmp_path / "bag"), "--publish", "--rate", "4", "--wait", "4",
             "--topics", "/joint_states", "--wait-active", "no_such_node"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=os.environ.copy())
        assert frozen.stdout.readline().strip() == "player waiting"
        frozen.send_signal(signal.SIGSTOP)
        output, _ = player.communicate(timeout=60)
        wall = time.monotonic() - t_start
    finally:
        if player is not None and player.poll() is None:
            player.terminate()
            player.wait(10)
        frozen.send_signal(signal.SIGCONT)
        frozen.terminate()
        frozen.wait(10)
    assert player.returncode == 0, output
    assert "first message not acknowledged by every subscriber in time on: joint_states" \
        in output, output
    assert "played 100 messages on 1 topics" in output and "no_such_node" in output
    assert wall >= 8.0  # --wait for the node, then --wait at the first message


def test_unknown_type_and_missing_bag_are_bag_errors(tmp_path):
    with pytest.raises(BagError, match="unknown message type"):
        message_class("nonexistent_msgs/msg/Thing")
    out = subprocess.run([sys.executable, "-m", "diffusion_policy_ros.cli", "replay", "--bag",
                          str(tmp_path / "nope"), "--publish"], capture_output=True, text=True,
                         env=os.environ.copy(), timeout=60)
    assert out.returncode == 2 and "no such bag" in out.stderr


@pytest.mark.slow
def test_nodes_on_sim_time_act_on_a_played_bag(ros, start_node, tiny_demos, tiny_checkpoint):
    """replay.launch.py's graph without launch: the bag's Kinect stream, joint_states and
    instruction drive rgbd_sync_node and policy_node on /clock from the bag."""
    from rosbags.rosbag2 import Reader

    from diffusion_policy_ros.config import CONFIG_DIR
    from diffusion_policy_ros.learning.collect import episode_name

    bag = tiny_demos / episode_name(21)
    with Reader(bag) as reader:
        bag_start, bag_end = reader.start_time, reader.end_time
    sim_time = ["-p", "use_sim_time:=true"]
    start_node("diffusion_policy_ros.ros.rgbd_sync_node",
               ["--params-file", str(CONFIG_DIR / "rgbd_sync.yaml"), *sim_time])
    policy = start_node("diffusion_policy_ros.ros.policy_node",
                        ["--params-file", str(CONFIG_DIR / "policy_node.yaml"), *sim_time,
                         "-p", f"checkpoint:={tiny_checkpoint}", "-p", "autostart:=true",
                         "-p", "device:=cpu"])
    stamps = []
    ros.node.create_subscription(JointTrajectory, "policy/action_chunk",
                                 lambda m: stamps.append(_ns(m.header.stamp)),
                                 QoSProfile(depth=20))
    log = open(f"{policy.log_path}.player", "w")  # noqa: SIM115 - closed below
    player = subprocess.Popen(
        [sys.executable, "-m", "diffusion_policy_ros.cli", "replay", "--bag", str(bag),
         "--publish", "--wait", "120", "--topics", "camera/rgb/image_raw",
         "camera/rgb/camera_info", "camera/depth_to_rgb/image_raw", "joint_states",
         "instruction", "--wait-active", "policy_node"], stdout=log, stderr=subprocess.STDOUT,
        env=os.environ.copy())
    try:
        ros.spin_until(lambda: player.poll() is not None, 240.0,
                       lambda: f"the player to finish\n{policy.log()}")
        ros.spin_for(0.5)
    finally:
        if player.poll() is None:
            player.terminate()
            player.wait(10)
        log.close()
    assert player.returncode == 0
    # Chunks carry the stamps of the recorded observations: the nodes ran on the bag's clock.
    assert len(stamps) >= 5, policy.log()
    assert all(bag_start <= s <= bag_end for s in stamps)
    assert stamps == sorted(stamps)
