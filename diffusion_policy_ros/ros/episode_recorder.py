"""``dpr bringup --out``: per-episode GIF and plot from the live topics.

Thin adapter: subscriptions on a node that someone else spins, feeding
``viz.episode_media.EpisodeRecording``. Reads the raw colour image
(``camera/rgb/image_raw``, 30 Hz), ``camera/rgb/camera_info`` and
``policy/markers`` (the predicted end-effector path ``policy_node`` publishes) at
the GIF's 10 frames/s, ``joint_states`` (500 Hz) and ``tracker/reference`` at the
plot's 50 Hz, and ``policy/action_chunk`` as it arrives (arrival = header stamp +
latency on this node's clock). All but the chunks are polled (``ros.polled``): a
timer takes the newest message of each, so the executor does not wake, and rclpy
does not convert a 640 x 360 image, for messages the recording would drop. Every
time is a header stamp, so the plot's time axis is the episode's own (sim time with
``use_sim_time``). The path is projected with ``camera_to_base`` from
``config/rgbd_sync.yaml`` (what ``rgbd_sync_node`` runs with). Only created with
``--out``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image, JointState
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import MarkerArray

from diffusion_policy_ros.config import CONFIG_DIR
from diffusion_policy_ros.perception.geometry import CameraModel
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
#: The GIF's frame period (node clock).
FRAME_PERIOD_S = 0.1


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
        self.camera: CameraModel | None = None
        self.recording: EpisodeRecording | None = None
        self.decode_errors = 0
        newest = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
        self.images = PolledSubscription(node, Image, "camera/rgb/image_raw", newest)
        self.camera_infos = PolledSubscription(node, CameraInfo, "camera/rgb/camera_info",
                                               newest)
        self.markers = PolledSubscription(node, MarkerArray, "policy/markers",
                                          QoSProfile(depth=1))
        self.joint_states = PolledSubscription(node, JointState, "joint_states", newest)
        self.references = PolledSubscription(node, JointState, "tracker/reference", newest)
        node.create_timer(FRAME_PERIOD_S, self._take_frame)
        node.create_timer(SIGNAL_PERIOD_S, self._take_signals)
        node.create_subscription(JointTrajectory, "policy/action_chunk", self._on_chunk,
                                 QoSProfile(depth=10))

    def start(self) -> None:
        """Begin a new episode now (node clock)."""
        now_s = self.node.get_clock().now().nanoseconds * 1e-9
        # The newest message at each tick is up to a publish period older than the tick,
        # so consecutive ones can be closer than a period: half a period of slack keeps them.
        self.recording = EpisodeRecording(self.joint_names, now_s,
                                          frame_period_s=FRAME_PERIOD_S,
                                          frame_slack_s=FRAME_PERIOD_S / 2,
                                          signal_period_s=SIGNAL_PERIOD_S,
                                          signal_slack_s=SIGNAL_PERIOD_S / 2)

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

    def _take_frame(self) -> None:
        """The newest image, with the newest predicted path and camera model."""
        if self.camera is None and (info := self.camera_infos.take_latest()) is not None:
            self.camera = camera_model(info)
        if (markers := self.markers.take_latest()) is not None:
            self._set_path(markers)
        msg = self.images.take_latest()
        rec = self.recording
        if msg is None or rec is None or not rec.wants_frame(_s(msg.header.stamp)):
            return
        try:
            rgb = decode_color(raw_image(msg))
        except FrameRejected:
            self.decode_errors += 1
            return
        rec.add_frame(_s(msg.header.stamp), rgb)

    def _set_path(self, msg: MarkerArray) -> None:
        if self.recording is None:
            return
        path = next((m for m in msg.markers if m.ns == PATH_MARKER_NS), None)
        target = next((m for m in msg.markers if m.ns != PATH_MARKER_NS), None)
        if path is not None and path.points:
            closing = target is not None and target.color.r > target.color.b
            self.recording.set_path([(p.x, p.y, p.z) for p in path.points], closing)

    def _take_signals(self) -> None:
        """The newest measured and reference joint positions."""
        measured, reference = self.joint_states.take_latest(), self.references.take_latest()
        rec = self.recording
        if rec is None:
            return
        if measured is not None and (q := self._positions(measured)) is not None:
            rec.add_measured(_s(measured.header.stamp), q)
        if reference is not None and (q := self._positions(reference)) is not None:
            rec.add_reference(_s(reference.header.stamp), q)

    def _on_chunk(self, msg: JointTrajectory) -> None:
        if self.recording is not None:
            now_ns = self.node.get_clock().now().nanoseconds
            latency_ms = (now_ns - stamp_to_ns(msg.header.stamp)) * 1e-6
            self.recording.add_chunk(now_ns * 1e-9, latency_ms)
