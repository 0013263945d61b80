"""rgbd_sync_node in its own process, fed a Kinect-like 1280x720 stream over DDS."""

import copy
import dataclasses

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile
from sensor_msgs.msg import CameraInfo, Image, PointCloud2
from std_msgs.msg import Header

from diffusion_policy_ros.config import CONFIG_DIR
from diffusion_policy_ros.perception.geometry import CameraModel
from diffusion_policy_ros.perception.image_decoding import RawImage
from diffusion_policy_ros.perception.pipeline import RgbdSyncConfig
from diffusion_policy_ros.perception.synthetic_scene import KINECT_720P, SyntheticKinect
from diffusion_policy_ros.ros.conversions import (
    camera_info_msg,
    image_msg,
    ns_to_stamp,
    stamp_to_ns,
    xyzrgb_from_cloud_msg,
)

pytestmark = pytest.mark.ros
PERIOD_NS = 33_333_333


class KinectFeed:
    """Publishes the synthetic scene on the Azure Kinect driver's topics."""

    def __init__(self, ros):
        self.ros = ros
        cfg = RgbdSyncConfig()
        self.kinect = SyntheticKinect(KINECT_720P, cfg.camera_to_base(), row_padding_bytes=128)
        qos = QoSProfile(depth=5)
        node = ros.node
        self.pubs = {
            "rgb": node.create_publisher(Image, "camera/rgb/image_raw", qos),
            "depth": node.create_publisher(Image, "camera/depth_to_rgb/image_raw", qos),
            "info": node.create_publisher(CameraInfo, "camera/rgb/camera_info", qos),
        }
        header = Header(frame_id="rgb_camera_link")
        self.color = image_msg(self.kinect.color_image(), header)
        self.depth = image_msg(self.kinect.depth_image(), header)
        self.info = camera_info_msg(KINECT_720P, header)

    def publish(self, name: str, msg, stamp_ns: int) -> None:
        msg.header.stamp = ns_to_stamp(stamp_ns)
        self.pubs[name].publish(msg)

    def frame(self, color_ns: int | None, depth_ns: int | None, color=None, depth=None,
              info=None):
        """One camera frame; a stamp of None loses that image (the driver or the network)."""
        if color_ns is not None:
            self.publish("info", info or self.info, color_ns)
            self.publish("rgb", color or self.color, color_ns)
        if depth_ns is not None:
            self.publish("depth", depth or self.depth, depth_ns)


@pytest.fixture
def sync_node(start_node):
    return start_node("diffusion_policy_ros.ros.rgbd_sync_node", [
        "--params-file", str(CONFIG_DIR / "rgbd_sync.yaml"),
        "-p", "workspace_min:=[0.15, -0.45, -0.02]",
        "-p", "diagnostics_period_s:=0.2"])


def test_sync_node_pairs_kinect_stream_and_survives_bad_input(ros, sync_node):
    feed = KinectFeed(ros)
    images, clouds, diags, full_clouds = {}, {}, [], []
    sub_qos = QoSProfile(depth=100)
    ros.node.create_subscription(Image, "observation/image",
                                 lambda m: images.__setitem__(stamp_to_ns(m.header.stamp), m),
                                 sub_qos)
    ros.node.create_subscription(PointCloud2, "observation/points",
                                 lambda m: clouds.__setitem__(stamp_to_ns(m.header.stamp), m),
                                 sub_qos)
    ros.node.create_subscription(DiagnosticArray, "/diagnostics", diags.append, sub_qos)
    ros.node.create_subscription(PointCloud2, "camera/points", full_clouds.append, sub_qos)

    def latest_diagnostics():
        for arr in reversed(diags):
            for status in arr.status:
                if status.name.startswith("rgbd_sync_node"):
                    return {kv.key: kv.value for kv in status.values}
        return {}

    ros.spin_until(lambda: all(p.get_subscription_count() > 0 for p in feed.pubs.values())
                   and ros.node.count_publishers("observation/points") > 0, 30.0,
                   "discovery of rgbd_sync_node")

    # Publisher-side matching can complete before the node's readers accept data, so
    # stream warm-up frames until one comes back through the whole path.
    t_warm = 900_000_000_000
    while not clouds:
        t_warm += PERIOD_NS
        assert t_warm < 900_000_000_000 + 600 * PERIOD_NS, "no observation within 20 s"
        feed.frame(t_warm, t_warm)
        ros.spin_for(1 / 30)

    # 45 frames at 30 Hz with stamp jitter; depth of frames 10 and 25 lost, RGB of frame 30
    # lost (its depth is left unmatched); 15/16 reordered.
    rng = np.random.default_rng(0)
    t0 = t_warm + PERIOD_NS
    stamps = [t0 + i * PERIOD_NS + int(rng.integers(-2_000_000, 2_000_000)) for i in range(45)]
    order = list(range(45))
    order[15], order[16] = 16, 15
    expected = set()
    for i in order:
        lost = i in (10, 25)
        depth_jitter = int(rng.integers(-3_000_000, 3_000_000))
        feed.frame(None if i == 30 else stamps[i], None if lost else stamps[i] + depth_jitter)
        if not lost and i not in (15, 30):
            expected.add(stamps[i])
        ros.spin_for(1 / 30)
    # Reliable keep-last-5 queues may still lose a frame when both processes share two
    # busy cores; the pairing logic itself is covered exactly by the unit tests.
    ros.wait_for(lambda: expected <= set(clouds), 10.0)
    # Image and cloud of a pair travel as two messages: either may be the one lost.
    cloud_stamps = {s for s in clouds if s > t_warm}
    image_stamps = {s for s in images if s > t_warm}
    measured = cloud_stamps & image_stamps
    missing = sorted(stamps.index(s) for s in expected - measured)
    allowed = set(expected)
    if stamps[16] not in cloud_stamps | image_stamps:  # 16 lost: reordered 15 is on time
        allowed.add(stamps[15])
    assert cloud_stamps <= allowed and image_stamps <= allowed
    # A stall of one subscription longer than max_age_s also drops pairs, by design and
    # counted (drops_late, drops_unmatched_depth): those may account for a few more.
    diag = latest_diagnostics()
    counted = (int(diag.get("drops_late", 0)) + int(diag.get("drops_unmatched_depth", 0))
               - 1)  # frame 30's depth, unmatched by design
    assert len(missing) <= max(2, min(5, counted)), (
        f"missing frames {missing}, diagnostics {diag}\n" + sync_node.log())

    scene = feed.kinect.scene
    for stamp in measured:
        cloud = clouds[stamp]
        assert cloud.header.frame_id == "base_link" and cloud.width * cloud.height == 1024
        points, _ = xyzrgb_from_cloud_msg(cloud)
        assert scene.distance_to_surfaces(points).max() < 0.004
        img = images[stamp]
        assert (img.encoding, img.height, img.width) == ("rgb8", 128, 128)
    # The rviz cloud: the whole frame in base_link, at full_cloud_rate_hz (5) at most.
    assert 1 <= len(full_clouds) <= 5 * (len(measured) / 30 + 1) + 1, len(full_clouds)
    points, _ = xyzrgb_from_cloud_msg(full_clouds[-1])
    assert full_clouds[-1].header.frame_id == "base_link" and len(points) > 10000
    assert scene.distance_to_surfaces(points).max() < 0.006
    # Input and output rates while the stream ran (they decay once it stops), and the
    # skew statistics of its pairs.
    def highest(key: str) -> float:
        return max(float(kv.value) for arr in diags for status in arr.status
                   if status.name.startswith("rgbd_sync_node")
                   for kv in status.values if kv.key == key)

    for name in ("rgb", "depth", "camera_info", "output"):
        assert 15.0 < highest(f"{name}_rate_hz") < 45.0, (name, highest(f"{name}_rate_hz"))
    diag = latest_diagnostics()
    assert abs(float(diag["skew_ms_p50"])) < 3.0 and float(diag["skew_ms_p99"]) < 10.0, diag

    # Each malformed class, then a good frame that must still give a correct observation.
    bad_k = copy.deepcopy(feed.info)
    bad_k.k = [0.0] * 9
    small = image_msg(RawImage(360, 640, "16UC1", 1280, bytes(360 * 1280)), Header())
    truncated = copy.deepcopy(feed.color)
    truncated.data = bytes(feed.color.data)[:-4]
    yuv = copy.deepcopy(feed.color)
    yuv.encoding = "yuv422"
    nan_depth = image_msg(RawImage(720, 1280, "32FC1", 1280 * 4,
                                   np.full((720, 1280), np.nan, "<f4").tobytes()), Header())
    inf_depth = image_msg(RawImage(720, 1280, "32FC1", 1280 * 4,
                                   np.full((720, 1280), np.inf, "<f4").tobytes()), Header())
    far_depth = image_msg(RawImage(720, 1280, "16UC1", 2560,
                                   np.full((720, 1280), 2900, "<u2").tobytes()), Header())
    cases = {"unknown_encoding": dict(color=yuv), "bad_data_length": dict(color=truncated),
             "size_mismatch": dict(depth=small), "bad_camera_info": dict(info=bad_k),
             "empty_workspace": dict(depth=nan_depth), "empty_workspace_far": dict(depth=far_depth),
             "empty_workspace_inf": dict(depth=inf_depth)}
    def dropped(reason: str) -> int:
        return int(latest_diagnostics().get(f"drops_{reason}", 0))

    def send_until(send, predicate, what) -> None:
        """Resend (at most 5 times): reliable keep-last-5 queues can still drop a sample
        on a busy 2-core machine (measured: ~2% of camera_info next to 3.7 MB images)."""
        for attempt in range(5):
            send()
            if attempt == 4:
                ros.spin_until(predicate, 3.0, what)
            elif ros.wait_for(predicate, 3.0):
                return

    t = stamps[-1]
    for name, bad in cases.items():
        reason = name.removesuffix("_far").removesuffix("_inf")
        before = dropped(reason)
        bad_stamps = []

        def send_bad(bad=bad, bad_stamps=bad_stamps):
            nonlocal t
            t += PERIOD_NS
            bad_stamps.append(t)
            if "info" in bad:
                feed.publish("info", bad["info"], t)
            else:
                feed.frame(t, t, **bad)

        def send_good():
            nonlocal t
            t += PERIOD_NS
            feed.frame(t, t)

        send_until(send_bad, lambda r=reason, n=before: dropped(r) > n,
                   lambda n=name: f"diagnostics counting {n}: {latest_diagnostics()}\n"
                   + sync_node.log())
        send_until(send_good, lambda seen=bad_stamps: max(clouds) > seen[-1],
                   f"a good frame after {name}")
        assert not set(bad_stamps) & set(clouds), name
        points, _ = xyzrgb_from_cloud_msg(clouds[max(clouds)])
        assert scene.distance_to_surfaces(points).max() < 0.004
    assert sync_node.alive(), sync_node.log()

    minimum = {"unknown_encoding": 1, "bad_data_length": 1, "size_mismatch": 1,
               "bad_camera_info": 1, "empty_workspace": 3, "late": 1, "unmatched_depth": 1}
    ros.spin_until(lambda: all(int(latest_diagnostics().get(f"drops_{r}", 0)) >= n
                               for r, n in minimum.items()), 10.0,
                   lambda: f"diagnostics counting every drop reason: {latest_diagnostics()}")
    values = latest_diagnostics()
    assert float(values["processing_ms_p50"]) > 0
    assert "dropped frame (unknown_encoding)" in sync_node.log()


def test_invalid_parameters_fail_fast_with_a_clear_message(start_node):
    proc = start_node("diffusion_policy_ros.ros.rgbd_sync_node",
                      ["-p", "workspace_min:=[1.0, 1.0, 1.0]",
                       "-p", "workspace_max:=[0.0, 2.0, 2.0]"])
    assert proc.proc.wait(60) == 2
    assert "workspace_min" in proc.log()


def test_camera_model_round_trips_through_camera_info():
    cam = dataclasses.replace(KINECT_720P)
    msg = camera_info_msg(cam, Header())
    from diffusion_policy_ros.ros.conversions import camera_model
    assert camera_model(msg) == CameraModel(cam.width, cam.height, cam.k, cam.distortion_model,
                                            cam.d)
