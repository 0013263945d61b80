"""``dpr bringup --out``: per-episode GIF and plot from the live topics.

Thin adapter: subscriptions on a node that someone else spins, feeding
``viz.episode_media.EpisodeRecording``. Subscribes the raw colour image
(``camera/rgb/image_raw``, thinned to 10 frames/s), ``camera/rgb/camera_info``,
``policy/markers`` (the predicted end-effector path ``policy_node`` publishes),
``joint_states`` and ``tracker/reference`` (thinned to 50 Hz), and
``policy/action_chunk`` (arrival = header stamp + latency on this node's
clock). Every time is a header stamp, so the plot's time axis is the
episode's own (sim time with ``use_sim_time``). The path is projected with
``camera_to_base`` from ``config/rgbd_sync.yaml`` (what ``rgbd_sync_node``
runs with). ``joint_states`` (500 Hz) is polled, its newest message taken at
each 50 Hz plot sample, so the executor does not wake for every message
(``ros.polled``). Costs one decode of each kept image: only created with
``--out``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, Image, JointState
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import MarkerArray

from diffusion_policy_ros.config import CONFIG_DIR
from diffusion_policy_ros.perception.image_decoding import FrameRejected, decode_color
from diffusion_policy_ros.perception.pipeline import RgbdSyncConfig
from diffusion_policy_ros.ros.conversions import camera_model, raw_image, stamp_to_ns
from diffusion_policy_ros.ros.polled import PolledSubscription
from diffusion_policy_ros.sim.env import load_sync_config
from diffusion_policy_ros.sim.scene import JOINT_NAMES
from diffusion_policy_ros.viz.episode_media import EpisodeRecording, PathProjector

PATH_MARKER_NS = "policy_ee_path"
#: The plot's sample period of joint_states and tracker/reference (node clock).
SIGNAL_PERIOD_S = 0.02


def _s(stamp) -> float:
    return stamp_to_ns(stamp) * 1e-9


class EpisodeMediaRecorder:
    """Records while an episode runs; ``finish`` writes ``stem.gif`` and ``stem.png``."""

    def __init__(self, node: Node, sync_config: RgbdSyncConfig | None = None,
                 joint_names=JOINT_NAMES):
        self.node = node
        self.joint_names = list(joint_names)
        self.camera_to_base = (sync_config or load_sync_config(CONFIG_DIR / "rgbd_sync.yaml")
                               ).camera_to_base()
        self.camera = None
        self.recording: EpisodeRecording | None = None
        self.decode_errors = 0
        best_effort = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
        node.create_subscription(Image, "camera/rgb/image_raw", self._on_image,
                                 qos_profile_sensor_data)
        node.create_subscription(CameraInfo, "camera/rgb/camera_info", self._on_info,
                                 qos_profile_sensor_data)
        node.create_subscription(MarkerArray, "policy/markers", self._on_markers,
                                 QoSProfile(depth=5))
        self.joint_states = PolledSubscription(
            node, JointState, "joint_states",
            QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
        node.create_timer(SIGNAL_PERIOD_S, self._take_joint_states)
        node.create_subscription(JointState, "tracker/reference", self._on_reference,
                                 best_effort)
        node.create_subscription(JointTrajectory, "policy/action_chunk", self._on_chunk,
                                 QoSProfile(depth=10))

    def start(self) -> None:
        """Begin a new episode now (node clock)."""
        now_s = self.node.get_clock().now().nanoseconds * 1e-9
        self.recording = EpisodeRecording(self.joint_names, now_s,
                                          signal_period_s=SIGNAL_PERIOD_S)

    def finish(self, out_dir: str | Path, stem: str, title: str = "",
               caption: str = "") -> dict[str, str]:
        """Write the episode's files (the last frame gets ``caption``); {} if none recorded."""
        rec, self.recording = self.recording, None
        if rec is None:
            return {}
        rec.trace.title = title
        if rec.frames and caption:
            rec.frames[-1].caption = caption
        projector = PathProjector(self.camera, self.camera_to_base) if self.camera else None
        return rec.write(out_dir, stem, projector)

    # callbacks

    def _positions(self, msg: JointState) -> np.ndarray | None:
        """Positions in ``joint_names`` order, NaN for joints the message lacks
        (``tracker/reference`` has no gripper); None without the arm joints."""
        if len(msg.position) != len(msg.name):
            return None
        index = {n: i for i, n in enumerate(msg.name)}
        if not all(n in index for n in self.joint_names[:-1]):
            return None
        return np.array([msg.position[index[n]] if n in index else np.nan
                         for n in self.joint_names])

    def _on_image(self, msg: Image) -> None:
        rec = self.recording
        if rec is None or not rec.wants_frame(_s(msg.header.stamp)):
            return
        try:
            rgb = decode_color(raw_image(msg))
        except FrameRejected:
            self.decode_errors += 1
            return
        rec.add_frame(_s(msg.header.stamp), rgb)

    def _on_info(self, msg: CameraInfo) -> None:
        if self.camera is None:
            self.camera = camera_model(msg)

    def _on_markers(self, msg: MarkerArray) -> None:
        if self.recording is None:
            return
        path = next((m for m in msg.markers if m.ns == PATH_MARKER_NS), None)
        target = next((m for m in msg.markers if m.ns != PATH_MARKER_NS), None)
        if path is not None and path.points:
            closing = target is not None and target.color.r > target.color.b
            self.recording.set_path([(p.x, p.y, p.z) for p in path.points], closing)

    def _take_joint_states(self) -> None:
        msg = self.joint_states.take_latest()
        if msg is not None and self.recording is not None:
            q = self._positions(msg)
            if q is not None:
                self.recording.add_measured(_s(msg.header.stamp), q)

    def _on_reference(self, msg: JointState) -> None:
        if self.recording is not None:
            q = self._positions(msg)
            if q is not None:
                self.recording.add_reference(_s(msg.header.stamp), q)

    def _on_chunk(self, msg: JointTrajectory) -> None:
        if self.recording is not None:
            now_ns = self.node.get_clock().now().nanoseconds
            latency_ms = (now_ns - stamp_to_ns(msg.header.stamp)) * 1e-6
            self.recording.add_chunk(now_ns * 1e-9, latency_ms)
