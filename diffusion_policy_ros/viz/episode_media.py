"""Per-episode pictures for people: an animated GIF of the camera view with the
predicted end-effector path drawn in, and a plot of references, measurements and
chunk timing.

Pure (numpy, OpenCV, Pillow, matplotlib's Agg backend; no rclpy), fed either
by ``dpr bringup --out`` (ROS topics) or by ``dpr eval --out`` (in process).
The path is projected with the camera's own model (K and D from camera_info)
and the ``camera_to_base`` extrinsics that ``rgbd_sync_node`` uses, so a path
that sits on the object in the picture sits on it in ``base_link`` too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw

from diffusion_policy_ros.perception.geometry import CameraModel, RigidTransform

PATH_RGB = (40, 220, 60)
CLOSING_RGB = (230, 30, 30)
OPEN_RGB = (30, 110, 240)


class PathProjector:
    """``base_link`` points -> pixels of the colour camera."""

    def __init__(self, camera: CameraModel, camera_to_base: RigidTransform):
        self.camera = camera
        self.base_to_camera = camera_to_base.inverse()

    def project(self, points_base_m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, 3) -> ((N, 2) pixel coordinates, (N,) in front of the camera and in the image)."""
        points = np.asarray(points_base_m, dtype=np.float64).reshape(-1, 3)
        cam = self.base_to_camera.apply(points)
        in_front = cam[:, 2] > 1e-3
        d = np.asarray(self.camera.d, dtype=np.float64) if self.camera.has_distortion() \
            else np.zeros(5)
        pixels, _ = cv2.projectPoints(cam.reshape(-1, 1, 3), np.zeros(3), np.zeros(3),
                                      self.camera.matrix(), d)
        pixels = pixels.reshape(-1, 2)
        inside = ((pixels[:, 0] >= 0) & (pixels[:, 0] < self.camera.width)
                  & (pixels[:, 1] >= 0) & (pixels[:, 1] < self.camera.height))
        return pixels, in_front & inside


@dataclasses.dataclass
class MediaFrame:
    """One picture of the episode: camera image and the path predicted at that time."""

    t_s: float
    image_rgb: np.ndarray
    """(H, W, 3) uint8."""
    path_base_m: np.ndarray | None = None
    """(T, 3) end-effector positions of the newest chunk, or None before the first."""
    closing: bool = False
    """The chunk closes the gripper (drawn red at its end, blue otherwise)."""
    caption: str = ""


def draw_frame(frame: MediaFrame, projector: PathProjector | None,
               width: int = 480) -> Image.Image:
    """The frame's image scaled to ``width`` px (down or up: GIFs of any camera
    resolution read alike), with the path and caption."""
    image = Image.fromarray(np.ascontiguousarray(frame.image_rgb[..., :3]))
    scale = width / image.width
    if image.width != width:
        image = image.resize((width, round(image.height * scale)), Image.Resampling.LANCZOS)
    draw = ImageDraw.Draw(image)
    if projector is not None and frame.path_base_m is not None and len(frame.path_base_m):
        pixels, ok = projector.project(frame.path_base_m)
        pts = [tuple(p * scale) for p, good in zip(pixels, ok, strict=True) if good]
        if len(pts) > 1:
            draw.line(pts, fill=PATH_RGB, width=3, joint="curve")
        if ok[-1]:
            x, y = pixels[-1] * scale
            draw.ellipse((x - 5, y - 5, x + 5, y + 5),
                         fill=CLOSING_RGB if frame.closing else OPEN_RGB, outline=(255, 255, 255))
    text = f"t = {frame.t_s:5.1f} s  {frame.caption}".rstrip()
    draw.rectangle((0, 0, image.width, 14), fill=(0, 0, 0))
    draw.text((4, 1), text, fill=(255, 255, 255))
    return image


def write_gif(frames: Sequence[MediaFrame], path: str | Path, projector: PathProjector | None,
              fps: float = 10.0, width: int = 480) -> Path:
    """Animated GIF (loops; the last frame held for 1 s).

    Each frame gets its own octree palette: PIL's default (median cut) spends its 256
    colours on the large table and floor and turns the small objects, whose colours
    the instructions name, grey or pink; the octree keeps them and is faster.
    """
    if not frames:
        raise ValueError("no frames to write")
    pictures = [draw_frame(f, projector, width).quantize(256, Image.Quantize.FASTOCTREE)
                for f in frames]
    duration_ms = max(20, round(1000.0 / fps))
    durations = [duration_ms] * (len(pictures) - 1) + [1000]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pictures[0].save(path, save_all=True, append_images=pictures[1:], duration=durations,
                     loop=0, optimize=True)
    return path


@dataclasses.dataclass
class EpisodeTrace:
    """Signals of one episode on one time axis (s from the episode start)."""

    joint_names: list[str]
    t_measured_s: list[float] = dataclasses.field(default_factory=list)
    measured: list[np.ndarray] = dataclasses.field(default_factory=list)
    t_reference_s: list[float] = dataclasses.field(default_factory=list)
    reference: list[np.ndarray] = dataclasses.field(default_factory=list)
    chunk_arrival_s: list[float] = dataclasses.field(default_factory=list)
    chunk_latency_ms: list[float] = dataclasses.field(default_factory=list)
    title: str = ""


def plot_episode(trace: EpisodeTrace, path: str | Path) -> Path:
    """PNG: arm joints (reference dashed, measured solid), gripper, chunk latency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True,
                             gridspec_kw={"height_ratios": [3, 1.3, 1.3]})
    arm, grip, lat = axes
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    measured = np.array(trace.measured).reshape(-1, len(trace.joint_names))
    reference = np.array(trace.reference).reshape(-1, len(trace.joint_names))
    for j, name in enumerate(trace.joint_names[:-1]):
        c = colors[j % len(colors)]
        if len(reference):
            arm.plot(trace.t_reference_s, reference[:, j], "--", color=c, lw=1.0)
        if len(measured):
            arm.plot(trace.t_measured_s, measured[:, j], color=c, lw=1.2, label=name)
    arm.set_ylabel("joint position (rad)")
    arm.legend(loc="upper right", ncol=3, fontsize=8, title="solid measured, dashed reference",
               title_fontsize=8)
    if len(reference):
        grip.plot(trace.t_reference_s, reference[:, -1] * 1e3, "--", color="k", lw=1.0,
                  label="reference")
    if len(measured):
        grip.plot(trace.t_measured_s, measured[:, -1] * 1e3, color="k", lw=1.2,
                  label="measured")
    grip.set_ylabel("gripper (mm)")
    grip.legend(loc="upper right", fontsize=8)
    if trace.chunk_arrival_s:
        lat.plot(trace.chunk_arrival_s, trace.chunk_latency_ms, ".", ms=4)
        for t in trace.chunk_arrival_s:
            lat.axvline(t, color="0.85", lw=0.5, zorder=0)
    lat.set_ylabel("chunk latency (ms)")
    lat.set_xlabel("time since episode start (s); grey ticks: chunk arrivals")
    if trace.title:
        fig.suptitle(trace.title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _spaced(t_s: float, last_s: float, period_s: float, slack_s: float) -> bool:
    """Whether a sample at ``t_s`` is far enough from the last one kept."""
    return t_s - last_s >= period_s - slack_s - 1e-6


class EpisodeRecording:
    """Collects one episode's pictures and signals; ``write`` saves GIF + PNG.

    Times are seconds on any clock; they are shown relative to ``start_s``.
    ``frame_period_s`` thins the camera frames (the camera runs at 30 Hz, a GIF
    at 10 frames/s is plenty and a third of the size); a frame is kept when it is at
    least ``frame_period_s - frame_slack_s`` newer than the last one kept; the joint
    signals likewise with ``signal_period_s`` and ``signal_slack_s``. A recorder that
    samples the newest message on a timer of the same period needs the slack: the newest
    sample is up to a publish period older than the tick, so without it every other
    tick's sample would be a hair too close to the last one and dropped.
    """

    def __init__(self, joint_names: Sequence[str], start_s: float, title: str = "",
                 frame_period_s: float = 0.1, signal_period_s: float = 0.02,
                 frame_slack_s: float = 0.0, signal_slack_s: float = 0.0):
        self.start_s = start_s
        self.frames: list[MediaFrame] = []
        self.trace = EpisodeTrace(list(joint_names), title=title)
        self.frame_period_s = frame_period_s
        self.frame_slack_s = frame_slack_s
        self.signal_period_s = signal_period_s
        self.signal_slack_s = signal_slack_s
        self._last_frame_s = -np.inf
        self._last_measured_s = -np.inf
        self._last_reference_s = -np.inf
        self.path_base_m: np.ndarray | None = None
        self.closing = False

    def wants_frame(self, t_s: float) -> bool:
        return _spaced(t_s, self._last_frame_s, self.frame_period_s, self.frame_slack_s)

    def add_frame(self, t_s: float, image_rgb: np.ndarray, caption: str = "") -> None:
        """Keep the frame (if one is due) with the newest predicted path."""
        if self.wants_frame(t_s):
            self._last_frame_s = t_s
            self.frames.append(MediaFrame(t_s - self.start_s, image_rgb, self.path_base_m,
                                          self.closing, caption))

    def set_path(self, path_base_m: npt.ArrayLike, closing: bool) -> None:
        self.path_base_m = np.asarray(path_base_m, dtype=np.float64).reshape(-1, 3)
        self.closing = bool(closing)

    def add_chunk(self, arrival_s: float, latency_ms: float) -> None:
        self.trace.chunk_arrival_s.append(arrival_s - self.start_s)
        self.trace.chunk_latency_ms.append(float(latency_ms))

    def add_measured(self, t_s: float, positions) -> None:
        if _spaced(t_s, self._last_measured_s, self.signal_period_s, self.signal_slack_s):
            self._last_measured_s = t_s
            self.trace.t_measured_s.append(t_s - self.start_s)
            self.trace.measured.append(np.asarray(positions, dtype=np.float64))

    def add_reference(self, t_s: float, positions) -> None:
        if _spaced(t_s, self._last_reference_s, self.signal_period_s, self.signal_slack_s):
            self._last_reference_s = t_s
            self.trace.t_reference_s.append(t_s - self.start_s)
            self.trace.reference.append(np.asarray(positions, dtype=np.float64))

    def write(self, out_dir: str | Path, stem: str,
              projector: PathProjector | None) -> dict[str, str]:
        """``out_dir/stem.gif`` (if any frame) and ``out_dir/stem.png``; their paths."""
        written = {}
        if self.frames:
            written["gif"] = str(write_gif(self.frames, Path(out_dir) / f"{stem}.gif", projector,
                                           fps=1.0 / self.frame_period_s))
        written["plot"] = str(plot_episode(self.trace, Path(out_dir) / f"{stem}.png"))
        return written
