"""Episode bags: written by EpisodeBagWriter, read back both ways, raw CDR usable by rclpy."""

import shutil

import numpy as np
import pytest
from rosbags.rosbag2 import Reader

from diffusion_policy_ros.learning import bag_messages as bm
from diffusion_policy_ros.learning.episode_bag import (
    JOINT_NAMES,
    TOPIC_ACTION_CHUNK,
    TOPIC_IMAGE,
    BagError,
    EpisodeBagWriter,
    ReplayPlan,
    bag_topics,
    read_episode,
    replay_plan,
)
from diffusion_policy_ros.perception.pipeline import RgbdObservationPipeline, RgbdSyncConfig
from diffusion_policy_ros.perception.synthetic_scene import KINECT_NFOV, SyntheticKinect

PERIOD_NS = 100_000_000
T0 = 5_000_000_000


@pytest.fixture(scope="module")
def kinect():
    cfg = RgbdSyncConfig()
    return cfg, SyntheticKinect(KINECT_NFOV, cfg.camera_to_base())


def q_at(t_ns: int) -> list[float]:
    s = (t_ns - T0) * 1e-9
    return [0.1 * s, -1.5 + 0.05 * s, 1.5, -1.5, -1.5, 0.0, 0.08 - 0.01 * s]


def write_episode(path, kinect, raw_camera: bool, with_observations: bool = True,
                  with_chunks: bool = True, frames: int = 5):
    cfg, cam = kinect
    pipeline = RgbdObservationPipeline(cfg)
    pipeline.set_camera(cam.camera)
    color, depth = cam.color_image(), cam.depth_image()
    with EpisodeBagWriter(path, raw_camera=raw_camera) as w:
        w.instruction(T0, "pick up the red cube")
        for k in range((frames + 16) * 10):
            t = T0 + k * 10_000_000
            w.joint_state(t, q_at(t), [0.0] * 7, [0.0] * 7)
        for i in range(frames):
            t = T0 + i * PERIOD_NS
            if raw_camera:
                w.raw_camera_frame(t, color, depth, cam.camera)
            if with_observations:
                obs = pipeline.process(color, depth)
                w.observation(t, obs.image_rgb, obs.points, obs.colors)
            if with_chunks:
                w.action_chunk(t, np.asarray([q_at(t + k * PERIOD_NS) for k in range(16)]), 0.1)
        w.outcome(T0 + frames * PERIOD_NS, {"success": True, "target": "red_cube"})


def test_collected_bag_round_trip(tmp_path, kinect):
    write_episode(tmp_path / "ep", kinect, raw_camera=False)
    ep = read_episode(tmp_path / "ep")
    assert len(ep) == 5 and ep.action_source == "chunks"
    assert ep.images.shape == (5, 128, 128, 3) and ep.points.shape == (5, 1024, 3)
    assert ep.instruction == "pick up the red cube" and ep.outcome["success"] is True
    np.testing.assert_allclose(ep.joint_positions[2], q_at(T0 + 2 * PERIOD_NS), atol=1e-9)
    np.testing.assert_allclose(ep.actions[1, 3], q_at(T0 + 4 * PERIOD_NS), atol=1e-6)
    cfg, cam = kinect
    assert cam.scene.distance_to_surfaces(ep.points[0]).max() < 0.004


def test_raw_camera_only_bag_runs_the_node_perception(tmp_path, kinect):
    write_episode(tmp_path / "raw", kinect, raw_camera=True, with_observations=False,
                  with_chunks=False)
    ep = read_episode(tmp_path / "raw")
    assert len(ep) == 5 and ep.action_source == "joint_states"
    write_episode(tmp_path / "both", kinect, raw_camera=True)
    ref = read_episode(tmp_path / "both")
    np.testing.assert_array_equal(ep.points, ref.points)
    np.testing.assert_array_equal(ep.images, ref.images)
    np.testing.assert_allclose(ep.actions, ref.actions, atol=1e-6)


def test_raw_cdr_deserializes_with_rclpy_into_real_messages(tmp_path, kinect):
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image, JointState, PointCloud2
    from trajectory_msgs.msg import JointTrajectory

    write_episode(tmp_path / "ep", kinect, raw_camera=True)
    types = {"sensor_msgs/msg/Image": Image, "sensor_msgs/msg/PointCloud2": PointCloud2,
             "sensor_msgs/msg/JointState": JointState,
             "trajectory_msgs/msg/JointTrajectory": JointTrajectory}
    seen = set()
    with Reader(tmp_path / "ep") as reader:
        for conn, _, raw in reader.messages():
            if conn.msgtype in types:
                msg = deserialize_message(bytes(raw), types[conn.msgtype])
                seen.add(conn.topic)
                if conn.topic == TOPIC_IMAGE:
                    assert (msg.encoding, msg.height, msg.width) == ("rgb8", 128, 128)
                if conn.topic == TOPIC_ACTION_CHUNK:
                    assert list(msg.joint_names) == list(JOINT_NAMES) and len(msg.points) == 16
                    assert msg.points[3].time_from_start.nanosec == 300_000_000
    assert {"camera/rgb/image_raw", "observation/points", "joint_states"} <= seen


def test_bad_bags_give_clear_errors(tmp_path, kinect):
    with pytest.raises(BagError, match="no such bag"):
        read_episode(tmp_path / "nope")
    write_episode(tmp_path / "ep", kinect, raw_camera=False)
    mcap = next((tmp_path / "ep").glob("*.mcap"))
    truncated = tmp_path / "truncated"
    shutil.copytree(tmp_path / "ep", truncated)
    data = mcap.read_bytes()
    (truncated / mcap.name).write_bytes(data[: len(data) // 2])
    with pytest.raises(BagError, match="truncated|corrupt|cannot open"):
        read_episode(truncated)
    with EpisodeBagWriter(tmp_path / "no_obs") as w:
        w.instruction(T0, "pick up the red cube")
        w.joint_state(T0, q_at(T0), [0.0] * 7, [0.0] * 7)
    with pytest.raises(BagError, match="missing required topics"):
        read_episode(tmp_path / "no_obs")
    with pytest.raises(FileExistsError):
        EpisodeBagWriter(tmp_path / "ep")


def test_bag_message_helpers_round_trip():
    pts = np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32)
    cols = np.random.default_rng(1).integers(0, 256, size=(10, 3)).astype(np.uint8)
    msg = bm.deserialize(bm.serialize(bm.xyzrgb_cloud(pts, cols, 123, "base_link")),
                         bm.POINT_CLOUD2)
    p2, c2 = bm.xyzrgb_from_cloud(msg)
    np.testing.assert_array_equal(p2, pts)
    np.testing.assert_array_equal(c2, cols)
    assert bm.stamp_ns_of(msg) == 123


def test_replay_plan_plays_raw_camera_topics_when_present_else_the_observations(tmp_path, kinect):
    """replay.launch.py refused plain `dpr collect` bags (no raw camera topics)."""
    plain, raw = tmp_path / "plain", tmp_path / "raw"
    write_episode(plain, kinect, raw_camera=False, frames=2)
    write_episode(raw, kinect, raw_camera=True, frames=2)
    assert replay_plan(bag_topics(plain)) == ReplayPlan(
        ("observation/image", "observation/points", "joint_states", "instruction"), False)
    assert replay_plan(bag_topics(raw)) == ReplayPlan(
        ("camera/rgb/image_raw", "camera/rgb/camera_info", "camera/depth_to_rgb/image_raw",
         "joint_states", "instruction"), True)
    # ros2 bag record names, no instruction: played, with a note.
    recorded = replay_plan(["/camera/rgb/image_raw", "/camera/rgb/camera_info",
                            "/camera/depth_to_rgb/image_raw", "/joint_states"])
    assert recorded.perception and "instruction" not in recorded.topics and recorded.note
    with pytest.raises(BagError, match="no joint_states"):
        replay_plan(["observation/image", "observation/points"])
    with pytest.raises(BagError, match="neither the raw camera topics"):
        replay_plan(["joint_states", "observation/image"])
    with pytest.raises(BagError, match="no such bag"):
        bag_topics(tmp_path / "absent")
