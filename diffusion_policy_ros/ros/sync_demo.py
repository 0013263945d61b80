"""``dpr sync-demo``: rgbd_sync_node on a synthetic 30 Hz Kinect stream over ROS 2.

``rgbd_sync_node`` runs as its own process with ``config/rgbd_sync.yaml``;
this process plays the analytic table-and-box scene on the Azure Kinect
driver's topics and checks the observations as the policy would see them
(pairing by stamp, latency, distance of every point to the true surfaces).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.timer import Timer
from sensor_msgs.msg import CameraInfo, Image, PointCloud2
from std_msgs.msg import Header

from diffusion_policy_ros.config import CONFIG_DIR
from diffusion_policy_ros.perception.pipeline import RgbdSyncConfig
from diffusion_policy_ros.perception.synthetic_scene import (
    KINECT_720P,
    KINECT_NFOV,
    SyntheticKinect,
)
from diffusion_policy_ros.ros.conversions import (
    camera_info_msg,
    image_msg,
    stamp_to_ns,
    xyzrgb_from_cloud_msg,
)
from diffusion_policy_ros.ros.dds_profiles import use_package_dds_profiles
from diffusion_policy_ros.ros.processes import stop_process

CAMERAS = {"1280x720": KINECT_720P, "640x576": KINECT_NFOV}


class SyntheticKinectPublisher(Node):
    """Publishes pre-rendered frames at ``rate_hz`` with the current time as stamp."""

    def __init__(self, kinect: SyntheticKinect, rate_hz: float = 30.0):
        super().__init__("synthetic_kinect")
        qos = QoSProfile(depth=5)
        self.rgb_pub = self.create_publisher(Image, "camera/rgb/image_raw", qos)
        self.depth_pub = self.create_publisher(Image, "camera/depth_to_rgb/image_raw", qos)
        self.info_pub = self.create_publisher(CameraInfo, "camera/rgb/camera_info", qos)
        header = Header(frame_id="rgb_camera_link")
        self.color = image_msg(kinect.color_image(), header)
        self.depth = image_msg(kinect.depth_image(), header)
        self.info = camera_info_msg(kinect.camera, header)
        self.sent = 0
        self.period_s = 1.0 / rate_hz
        self.timer: Timer | None = None

    def start(self) -> None:
        self.timer = self.create_timer(self.period_s, self._publish)

    def subscribers_ready(self) -> bool:
        return all(p.get_subscription_count() > 0
                   for p in (self.rgb_pub, self.depth_pub, self.info_pub))

    def _publish(self) -> None:
        stamp = self.get_clock().now().to_msg()
        for msg, pub in ((self.info, self.info_pub), (self.color, self.rgb_pub),
                         (self.depth, self.depth_pub)):
            msg.header.stamp = stamp
            pub.publish(msg)
        self.sent += 1


class ObservationMonitor(Node):
    """Checks observations as the policy would see them: pairing, latency, geometry."""

    def __init__(self, kinect: SyntheticKinect):
        super().__init__("observation_monitor")
        self.kinect = kinect
        self.latency_ms: list[float] = []
        self.surface_error_mm: list[float] = []
        self.image_stamps: set[int] = set()
        self.cloud_stamps: set[int] = set()
        self.sync_diagnostics: dict[str, str] = {}
        qos = QoSProfile(depth=10)
        self.cloud_sub = self.create_subscription(PointCloud2, "observation/points",
                                                  self._on_cloud, qos)
        self.create_subscription(Image, "observation/image",
                                 lambda m: self.image_stamps.add(stamp_to_ns(m.header.stamp)), qos)
        self.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, qos)

    def _on_cloud(self, msg: PointCloud2) -> None:
        stamp = stamp_to_ns(msg.header.stamp)
        self.cloud_stamps.add(stamp)
        self.latency_ms.append((self.get_clock().now().nanoseconds - stamp) * 1e-6)
        points, _ = xyzrgb_from_cloud_msg(msg)
        self.surface_error_mm.append(float(self.kinect.scene.distance_to_surfaces(points).max())
                                     * 1e3)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith("rgbd_sync_node"):
                self.sync_diagnostics = {kv.key: kv.value for kv in status.values}


def _spin_until(executor, predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.02)
    return predicate()


def run(seconds: float = 10.0, resolution: str = "1280x720") -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    node_proc = subprocess.Popen([sys.executable, "-m", "diffusion_policy_ros.ros.rgbd_sync_node",
                                  "--ros-args", "--params-file",
                                  str(CONFIG_DIR / "rgbd_sync.yaml")])
    use_package_dds_profiles()
    rclpy.init()
    try:
        kinect = SyntheticKinect(CAMERAS[resolution], RgbdSyncConfig().camera_to_base())
        camera, monitor = SyntheticKinectPublisher(kinect), ObservationMonitor(kinect)
        executor = SingleThreadedExecutor()
        executor.add_node(camera)
        executor.add_node(monitor)
        if not _spin_until(executor, lambda: camera.subscribers_ready()
                           and monitor.cloud_sub.get_publisher_count() > 0, 30.0):
            print("rgbd_sync_node was not discovered within 30 s")
            return 1
        print(f"streaming synthetic {resolution} Kinect frames at 30 Hz for {seconds:.0f} s ...")
        camera.start()
        end = time.monotonic() + seconds
        _spin_until(executor, lambda: time.monotonic() > end, seconds + 1.0)
        assert camera.timer is not None  # started above
        camera.destroy_timer(camera.timer)
        last = camera.sent
        _spin_until(executor, lambda: len(monitor.cloud_stamps) >= last, 2.0)
        _spin_until(executor, lambda: bool(monitor.sync_diagnostics), 2.0)
        paired = monitor.image_stamps & monitor.cloud_stamps
        lat, err = np.asarray(monitor.latency_ms), np.asarray(monitor.surface_error_mm)
        diag = monitor.sync_diagnostics
        print(f"frames sent {camera.sent}, observations {len(monitor.cloud_stamps)} "
              f"({len(monitor.cloud_stamps) / seconds:.1f} Hz), image+points with equal stamps "
              f"{len(paired)}")
        if lat.size:
            print(f"camera stamp -> observation received: p50 {np.median(lat):.1f} ms, "
                  f"p99 {np.percentile(lat, 99):.1f} ms; node processing p50 "
                  f"{diag.get('processing_ms_p50', '?')} ms, p99 "
                  f"{diag.get('processing_ms_p99', '?')} ms")
            print(f"worst distance of any observation point to the true table/box surfaces "
                  f"{err.max():.2f} mm")
        drops = {k: v for k, v in diag.items() if k.startswith("drops_")}
        print(f"drops: {drops or 'none'}")
        ok = camera.sent > 0 and len(paired) >= 0.9 * camera.sent and err.size > 0 \
            and err.max() < 5.0
        print("sync demo OK" if ok else "sync demo FAILED")
        return 0 if ok else 1
    finally:
        rclpy.try_shutdown()
        stop_process(node_proc)
