"""dpr replay --publish: a bag played into ROS topics with /clock from the bag time."""

import os
import re
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
         "--topics", "joint_states", "policy/action_chunk", "instruction"],
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


def test_unknown_type_and_missing_bag_are_bag_errors(tmp_path):
    with pytest.raises(BagError, match="unknown message type"):
        message_class("nonexistent_msgs/msg/Thing")
    out = subprocess.run([sys.executable, "-m", "diffusion_policy_ros.cli", "replay", "--bag",
                          str(tmp_path / "nope"), "--publish"], capture_output=True, text=True,
                         env=os.environ.copy(), timeout=60)
    assert out.returncode == 2 and "no such bag" in out.stderr
