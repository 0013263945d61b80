"""Raw CDR from a `dpr collect` bag publishes through rclpy as real messages."""

import pytest
from rclpy.qos import QoSProfile
from rosbags.rosbag2 import Reader
from sensor_msgs.msg import JointState, PointCloud2
from trajectory_msgs.msg import JointTrajectory

from diffusion_policy_ros.learning.collect import collect, episode_name

pytestmark = pytest.mark.ros
TYPES = {"observation/points": PointCloud2, "joint_states": JointState,
         "policy/action_chunk": JointTrajectory}


def test_bag_messages_publish_raw_and_arrive_deserialized(ros, tmp_path):
    collect(1, tmp_path, seed=11, progress=False)
    raw = {}
    with Reader(tmp_path / episode_name(11)) as reader:
        for conn, _, data in reader.messages():
            if conn.topic in TYPES and conn.topic not in raw:
                raw[conn.topic] = bytes(data)
    received = {}
    qos = QoSProfile(depth=5)
    pubs = {}
    for topic, msg_type in TYPES.items():
        name = f"replay/{topic}"
        ros.node.create_subscription(msg_type, name,
                                     lambda m, t=topic: received.setdefault(t, m), qos)
        pubs[topic] = ros.node.create_publisher(msg_type, name, qos)
    ros.spin_until(lambda: all(p.get_subscription_count() > 0 for p in pubs.values()), 10.0,
                   "discovery")
    for topic, pub in pubs.items():
        pub.publish(raw[topic])  # serialized bytes, as `ros2 bag play` sends them
    ros.spin_until(lambda: len(received) == len(TYPES), 10.0, "the replayed messages")
    assert received["observation/points"].width == 1024
    assert received["observation/points"].header.frame_id == "base_link"
    assert len(received["policy/action_chunk"].points) == 16
    assert list(received["joint_states"].name)[-1] == "gripper_joint"
