"""rgbd_sync_node: Kinect colour + registered depth -> synchronized policy observation.

Thin adapter around ``perception.sync_buffer`` and ``perception.pipeline``:
takes the camera topics on a thread of its own (``ros.polled.WaitedSubscriptions``:
each message is handled as soon as it is queued, not when the executor comes to it),
pairs frames by stamp, publishes
``observation/image`` and ``observation/points`` with the colour stamp (for every
pair, or ``output_rate_hz`` of them a second: ``perception.frame_schedule``),
``camera/points`` at a lower rate for rviz, and ``/diagnostics``.

A colour frame that arrives before its depth has its policy image published at once
(the image needs no depth): ``policy_node`` encodes it while this node waits for the
depth and computes the points, so that work is off the frame's path to its chunk. One
image at a time goes ahead: until a pair is made, later colour frames wait for theirs.
"""

from __future__ import annotations

import collections
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image, PointCloud2
from std_msgs.msg import Header

from diffusion_policy_ros.monitoring import RateMeter, RollingStats, ThrottledReasons
from diffusion_policy_ros.perception.frame_schedule import FrameRateSchedule
from diffusion_policy_ros.perception.image_decoding import FrameRejected
from diffusion_policy_ros.perception.pipeline import (
    Observation,
    RgbdObservationPipeline,
    RgbdSyncConfig,
)
from diffusion_policy_ros.perception.sync_buffer import RgbdSyncBuffer
from diffusion_policy_ros.ros.conversions import (
    camera_model,
    ns_to_stamp,
    raw_image,
    rgb8_image_msg,
    stamp_to_ns,
    xyzrgb_cloud_msg,
)
from diffusion_policy_ros.ros.lean_events import LeanEventsMixin
from diffusion_policy_ros.ros.node_main import run_node
from diffusion_policy_ros.ros.params import declare_config
from diffusion_policy_ros.ros.polled import (
    IncompatiblePublisherCheck,
    PolledSubscription,
    WaitedSubscriptions,
)
from diffusion_policy_ros.ros.publish_guard import PublishGuard
from diffusion_policy_ros.ros.realtime import MessageDrivenThread
from diffusion_policy_ros.ros.sim_clock import ClockThread

CAMERA_TOPICS = ("camera/rgb/image_raw", "camera/depth_to_rgb/image_raw", "camera/rgb/camera_info")


class RgbdSyncNode(LeanEventsMixin, Node):
    def __init__(self, **kwargs) -> None:
        # Before anything can fail: destroy_node reads them.
        self.camera_thread: MessageDrivenThread | None = None
        self.camera_topics: WaitedSubscriptions | None = None
        self.clock_thread: ClockThread | None = None
        super().__init__("rgbd_sync_node", **kwargs)
        self.config: RgbdSyncConfig = declare_config(self, RgbdSyncConfig)
        cfg = self.config
        self.clock_thread = ClockThread(self)
        self.pipeline = RgbdObservationPipeline(cfg)
        self.buffer = RgbdSyncBuffer(cfg.max_skew_s, cfg.max_age_s, cfg.buffer_capacity,
                                     cfg.clock_jump_s)
        self.rejects = ThrottledReasons(period_s=2.0)
        self.publishing = PublishGuard(self.get_logger(), self.context)
        self.rates = {name: RateMeter() for name in ("rgb", "depth", "camera_info", "output")}
        self.skew_ms = RollingStats()
        self.process_ms = RollingStats()
        self.frames_padded = 0
        self.output_schedule = (FrameRateSchedule(cfg.output_rate_hz)
                                if cfg.output_rate_hz > 0 else None)
        self.pairs_skipped = 0
        #: Stamps of the colour frames whose image went out before their depth came.
        self._images_ahead: collections.deque[int] = collections.deque(maxlen=8)
        #: Set while an image sent ahead waits for a pair: a frame whose depth is lost
        #: must not make every colour frame after it go ahead too.
        self._image_ahead_waiting = False
        self.images_ahead_total = 0
        self.last_observation: Observation | None = None
        self._window_drops = 0
        self._last_cloud_s = 0.0

        reliability = (ReliabilityPolicy.RELIABLE if cfg.sensor_qos_reliability == "reliable"
                       else ReliabilityPolicy.BEST_EFFORT)
        self._sensor_qos = QoSProfile(depth=5, reliability=reliability)
        self.image_pub = self.create_publisher(Image, "observation/image", QoSProfile(depth=2))
        self.points_pub = self.create_publisher(PointCloud2, "observation/points",
                                                QoSProfile(depth=2))
        self.cloud_pub = self.create_publisher(PointCloud2, "camera/points", QoSProfile(depth=1))
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", QoSProfile(depth=10))
        # On the steady clock, as every node here: a paused or slow sim-time clock must
        # not silence a node's health report.
        self.create_timer(cfg.diagnostics_period_s, self._publish_diagnostics,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        # camera_info first: a frame's intrinsics are in place before its images are paired.
        topics = [(CameraInfo, CAMERA_TOPICS[2], self._on_camera_info),
                  (Image, CAMERA_TOPICS[0], self._on_color),
                  (Image, CAMERA_TOPICS[1], self._on_depth)]
        handlers = {PolledSubscription(self, msg_type, topic, self._sensor_qos): handler
                    for msg_type, topic, handler in topics}
        # The camera thread's state against the diagnostics timer's reads.
        self._lock = threading.Lock()
        self.camera_topics = WaitedSubscriptions(self, handlers)
        self.qos_check = IncompatiblePublisherCheck(self, list(handlers))
        self.camera_thread = MessageDrivenThread(self.camera_topics, self._on_camera_message, 0,
                                                 "rgbd_sync_camera")
        self.camera_thread.start()
        self.get_logger().info(
            f"rgbd_sync_node ready: {cfg.num_points} points in {cfg.base_frame}, image "
            f"{cfg.image_size[0]}x{cfg.image_size[1]}, max skew {cfg.max_skew_s * 1e3:.1f} ms")

    def _drop(self, reason: str, message: str, warn: bool = False) -> None:
        self._window_drops += 1
        if self.rejects.record(reason, time.monotonic()):
            text = f"dropped frame ({reason}): {message} [{self.rejects.counts[reason]} so far]"
            if warn:
                self.get_logger().warning(text)
            else:
                self.get_logger().error(text)

    def _on_camera_message(self, taken) -> None:
        handler, msg = taken
        with self._lock:
            try:
                handler(msg)
            except Exception as exc:  # noqa: BLE001 - a bad message must never stop the thread
                self._drop("internal_error", f"{type(msg).__name__}: {type(exc).__name__}: {exc}")

    def _on_camera_info(self, msg: CameraInfo) -> None:
        self.rates["camera_info"].tick(time.monotonic())
        try:
            for warning in self.pipeline.set_camera(camera_model(msg)):
                self.get_logger().warning(warning, once=True)
        except FrameRejected as exc:
            self._drop(exc.reason, str(exc))

    def _on_color(self, msg: Image) -> None:
        self.rates["rgb"].tick(time.monotonic())
        stamp_ns = stamp_to_ns(msg.header.stamp)
        pairs = self.buffer.add_color(stamp_ns, msg)
        if not pairs and self.buffer.is_pending("color", stamp_ns):
            self._publish_image_ahead(stamp_ns, msg)
        self._handle_pairs(pairs)

    def _publish_image_ahead(self, stamp_ns: int, msg: Image) -> None:
        """The policy image of a colour frame still waiting for its depth, if the frame
        is one that will be output. A frame that cannot make one is left to the pair,
        which reports why."""
        if self._image_ahead_waiting or (self.output_schedule is not None
                                         and not self.output_schedule.would_take(stamp_ns)):
            return
        try:
            image = self.pipeline.image_of(raw_image(msg))
        except FrameRejected:
            return
        header = Header(stamp=msg.header.stamp, frame_id=msg.header.frame_id)
        self.publishing.publish(self.image_pub, rgb8_image_msg(image, header))
        self._images_ahead.append(stamp_ns)
        self._image_ahead_waiting = True
        self.images_ahead_total += 1

    def _on_depth(self, msg: Image) -> None:
        self.rates["depth"].tick(time.monotonic())
        self._handle_pairs(self.buffer.add_depth(stamp_to_ns(msg.header.stamp), msg))

    def _handle_pairs(self, pairs) -> None:
        if pairs:
            # The frame an image went ahead for was paired, or a later one was and the
            # buffer gave it up: the next due frame may go ahead again.
            self._image_ahead_waiting = False
        for pair in pairs:
            self.skew_ms.add(pair.skew_ns * 1e-6)
            if self.output_schedule is not None and \
                    not self.output_schedule.on_frame(pair.stamp_ns):
                self.pairs_skipped += 1  # not an observation the policy will use
                continue
            try:
                self._process(pair)
            except FrameRejected as exc:
                self._drop(exc.reason, str(exc), warn=exc.reason == "no_camera_info")
            except Exception as exc:  # noqa: BLE001 - a bad frame must never kill the node
                self._drop("internal_error", f"{type(exc).__name__}: {exc}")

    def _process(self, pair) -> None:
        color, depth = raw_image(pair.color), raw_image(pair.depth)
        image_ahead = pair.stamp_ns in self._images_ahead
        obs = self.pipeline.process(color, depth, with_image=not image_ahead)
        header = Header(stamp=ns_to_stamp(pair.stamp_ns), frame_id=self.config.base_frame)
        if not image_ahead:
            image_header = Header(stamp=header.stamp, frame_id=pair.color.header.frame_id)
            assert obs.image_rgb is not None  # made with_image
            self.publishing.publish(self.image_pub, rgb8_image_msg(obs.image_rgb, image_header))
        self.publishing.publish(self.points_pub, xyzrgb_cloud_msg(obs.points, obs.colors, header))
        now = time.monotonic()
        self.rates["output"].tick(now)
        self.process_ms.add(obs.stage_times_s["total"] * 1e3)
        self.last_observation = obs
        if obs.num_padded:
            self.frames_padded += 1
        rate = self.config.full_cloud_rate_hz
        if rate > 0 and now - self._last_cloud_s >= 1.0 / rate and \
                self.cloud_pub.get_subscription_count() > 0:
            self._last_cloud_s = now
            points, colors = self.pipeline.full_cloud(color, depth)
            self.publishing.publish(self.cloud_pub, xyzrgb_cloud_msg(points, colors, header))

    def _check_qos(self) -> None:
        """Warn once per topic when a publisher's QoS can never match our subscription."""
        for topic, publisher in self.qos_check.new_findings():
            self.get_logger().warning(
                f"{topic}: publisher '{publisher}' is best-effort and cannot match this "
                "reliable subscription; set sensor_qos_reliability:=best_effort (expect "
                "frame loss) or make the publisher reliable")

    def _publish_diagnostics(self) -> None:
        assert self.camera_thread is not None  # made in __init__
        self.camera_thread.raise_failure("rgbd_sync_node's camera thread")
        self._check_qos()
        with self._lock:
            msg = self._diagnostics()
        self.publishing.publish(self.diag_pub, msg)

    def _diagnostics(self) -> DiagnosticArray:
        now = time.monotonic()
        rates = {name: meter.rate_hz(now) for name, meter in self.rates.items()}
        status = DiagnosticStatus(name=f"{self.get_name()}: rgbd sync", hardware_id="rgbd_camera")
        drops = dict(self.buffer.drops) | dict(self.rejects.counts)
        has_camera = self.pipeline.camera is not None
        if rates["rgb"] > 0 and rates["output"] == 0 and has_camera:
            status.level = DiagnosticStatus.ERROR
            status.message = "frames arrive but none are usable"
        elif not has_camera:
            status.level, status.message = DiagnosticStatus.WARN, "waiting for camera_info"
        elif rates["rgb"] == 0:
            status.level, status.message = DiagnosticStatus.WARN, "no colour frames"
        elif self._window_drops or (self.last_observation and self.last_observation.num_padded):
            status.level, status.message = DiagnosticStatus.WARN, "dropping or padding frames"
        else:
            status.level, status.message = DiagnosticStatus.OK, "ok"
        assert self.clock_thread is not None  # made in __init__
        self.clock_thread.report(status)
        self._window_drops = 0
        obs = self.last_observation
        values = {
            **{f"{name}_rate_hz": f"{r:.2f}" for name, r in rates.items()},
            "rgb_frames_total": str(self.rates["rgb"].total),
            "depth_frames_total": str(self.rates["depth"].total),
            "camera_info_total": str(self.rates["camera_info"].total),
            "pairs_total": str(self.buffer.pairs_emitted),
            "observations_total": str(self.rates["output"].total),
            "pairs_skipped_total": str(self.pairs_skipped),
            "images_ahead_total": str(self.images_ahead_total),
            "skew_ms_p50": f"{self.skew_ms.percentile(50):.3f}",
            "skew_ms_p99": f"{self.skew_ms.percentile(99):.3f}",
            "processing_ms_p50": f"{self.process_ms.percentile(50):.3f}",
            "processing_ms_p99": f"{self.process_ms.percentile(99):.3f}",
            "pixel_stride": str(self.pipeline.stride),
            "frames_padded_total": str(self.frames_padded),
            "last_valid_points": str(obs.num_valid if obs else 0),
            "last_padded_points": str(obs.num_padded if obs else 0),
            "last_invalid_depth_fraction": f"{obs.invalid_depth_fraction:.3f}" if obs else "nan",
            **{f"drops_{reason}": str(n) for reason, n in sorted(drops.items())},
            "publish_refused": str(self.publishing.refused_total),
        }
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        return msg

    def destroy_node(self):
        if self.camera_thread is not None:
            self.camera_thread.stop()
        if self.camera_topics is not None:
            self.camera_topics.destroy()
        if self.clock_thread is not None:
            self.clock_thread.stop()
        return super().destroy_node()


def main(args=None) -> None:
    run_node(RgbdSyncNode, "rgbd_sync_node", args)


if __name__ == "__main__":
    main()
