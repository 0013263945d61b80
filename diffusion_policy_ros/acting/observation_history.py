"""Observation history for the policy: pair image + points by stamp, pick To frames.

``rgbd_sync_node`` publishes ``observation/image`` and ``observation/points``
of one frame with the identical stamp, at the camera rate (30 Hz). The policy
was trained on To frames one control period (``action_dt_s``, 0.1 s) apart,
newest last, each with the joint positions of that instant. This buffer

- pairs images and clouds by exact stamp (either may arrive first); a half
  that finds no partner within ``pair_timeout_s`` of the newest frame, or is
  pushed out of the pending queue, is dropped and counted as unpaired;
- keeps the paired frames of the last ``keep_s`` seconds, and joint_states
  (in the policy's joint order) of the same span;
- selects, for a chunk, the newest frame and, for each older step i, the
  frame whose stamp is closest to ``newest - i * dt_s``. Before the history
  reaches back that far the oldest frame stands in, as the training dataset
  pads an episode's first frames with frame 0 (counted as ``short``);
- pairs each selected frame with the latest joint_states at or before its stamp;
- refuses (``Refusal``: a reason and a sentence) when there is no frame,
  the newest is older than ``max_age_s`` (or stamped that far in the future:
  clock mismatch), a frame has no joint_states at or before it or only one
  older than ``max_age_s``, or a selected input is not finite.

A stream whose stamp jumps back by more than ``clock_jump_s`` (bag loop,
restarted sim clock) restarts that stream's history. ``restart(start_ns)``
begins a new task (the node calls it for every instruction message): frames and
joint_states stamped before ``start_ns`` are dropped (counted ``before_restart``),
so the first chunks of an episode are padded from its own first frame, as in
training, and never conditioned on the previous episode (a simulated reset
teleports the arm and objects). ``generation`` counts restarts, so a chunk
computed from a selection made before one can be discarded. Thread-safe: a ROS
subscription thread adds while the inference thread selects.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import threading
from collections.abc import Sequence

import numpy as np

from diffusion_policy_ros.joint_state_layout import joint_state_layout

NO_OBSERVATION = "no_observation"
STALE_OBSERVATION = "stale_observation"
FUTURE_OBSERVATION = "future_observation"
NO_JOINT_STATE = "no_joint_state"
STALE_JOINT_STATE = "stale_joint_state"
NON_FINITE_POINTS = "non_finite_points"
NON_FINITE_JOINT_STATE = "non_finite_joint_state"


@dataclasses.dataclass(frozen=True)
class Frame:
    stamp_ns: int
    image: np.ndarray
    """(H, W, 3) uint8 RGB."""
    points: np.ndarray
    """(N, 3) float32, base_link (m)."""
    colors: np.ndarray
    """(N, 3) uint8."""
    finite: bool
    """All point coordinates are finite."""


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why no chunk may be computed now: a counted ``reason`` and a sentence."""

    reason: str
    detail: str


@dataclasses.dataclass(frozen=True)
class Selection:
    """The To frames a chunk is conditioned on, oldest first."""

    stamp_ns: int
    """Stamp of the newest frame: the chunk's ``header.stamp``."""
    frame_stamps_ns: tuple[int, ...]
    observations: list[dict]
    """``PolicyRunner.predict`` input: image, points, point_colors, joint_positions."""
    offsets_s: tuple[float, ...]
    """Selected stamp minus target stamp for each older step (0 for the newest)."""
    short: bool
    """The history did not reach back To - 1 steps: the oldest frame stood in."""


class ObservationHistory:
    """Stamp-paired observation frames + joint_states, and the To-frame selection."""

    def __init__(self, joint_names: Sequence[str], keep_s: float = 2.0,
                 pair_timeout_s: float = 0.2, max_pending: int = 30,
                 clock_jump_s: float = 1.0, max_frames: int = 300,
                 max_joint_states: int = 5000):
        self.joint_names = list(joint_names)
        self.keep_s = keep_s
        self.pair_timeout_s = pair_timeout_s
        self.max_pending = max_pending
        self.clock_jump_s = clock_jump_s
        self.max_frames = max_frames
        self.max_joint_states = max_joint_states
        self._lock = threading.Lock()
        self._frames: list[Frame] = []
        self._frame_stamps: list[int] = []
        self._pending_images: dict[int, np.ndarray] = {}
        self._pending_points: dict[int, tuple[np.ndarray, np.ndarray, bool]] = {}
        self._newest_camera_ns: int | None = None
        self._js_stamps: list[int] = []
        self._js_rows: list[np.ndarray] = []
        self._start_ns: int | None = None
        self.generation = 0
        """Incremented by every ``restart``."""
        self.paired_total = 0
        self.images_total = 0
        self.points_total = 0
        self.joint_states_total = 0
        self.non_finite_frames = 0
        self.drops: collections.Counter[str] = collections.Counter()
        """Counted by reason: unpaired_image, unpaired_points, duplicate_image,
        duplicate_points, clock_jump_camera, clock_jump_joint_states, bad_joint_states,
        before_restart."""

    # -- input --------------------------------------------------------------------------------

    def add_image(self, stamp_ns: int, image: np.ndarray) -> bool:
        """Keep the image; True when it completes a frame (its cloud came first)."""
        with self._lock:
            self.images_total += 1
            if self._before_start(stamp_ns):
                return False
            self._camera_stamp(stamp_ns)
            if self._has_frame(stamp_ns) or stamp_ns in self._pending_images:
                self.drops["duplicate_image"] += 1
                return False
            points = self._pending_points.pop(stamp_ns, None)
            if points is None:
                self._pending_images[stamp_ns] = image
                self._trim_pending()
                return False
            self._add_frame(Frame(stamp_ns, image, *points))
            return True

    def add_points(self, stamp_ns: int, points: np.ndarray, colors: np.ndarray) -> bool:
        """Keep the cloud; True when it completes a frame (its image came first)."""
        finite = bool(np.isfinite(points).all())
        with self._lock:
            self.points_total += 1
            if self._before_start(stamp_ns):
                return False
            self._camera_stamp(stamp_ns)
            if self._has_frame(stamp_ns) or stamp_ns in self._pending_points:
                self.drops["duplicate_points"] += 1
                return False
            image = self._pending_images.pop(stamp_ns, None)
            if image is None:
                self._pending_points[stamp_ns] = (points, colors, finite)
                self._trim_pending()
                return False
            self._add_frame(Frame(stamp_ns, image, points, colors, finite))
            return True

    def add_joint_state(self, stamp_ns: int, names: Sequence[str],
                        positions: Sequence[float]) -> str:
        """Store one joint_states sample; returns '' or why it was ignored (counted)."""
        order, problem = joint_state_layout(self.joint_names, names, positions)
        with self._lock:
            self.joint_states_total += 1
            if problem:
                self.drops["bad_joint_states"] += 1
                return problem
            if self._before_start(stamp_ns):
                return ""
            row = np.array([positions[i] for i in order], dtype=np.float64)
            if self._js_stamps and \
                    stamp_ns < self._js_stamps[-1] - int(self.clock_jump_s * 1e9):
                self.drops["clock_jump_joint_states"] += 1
                self._js_stamps, self._js_rows = [], []
            if self._js_stamps and stamp_ns < self._js_stamps[-1]:
                i = bisect.bisect_right(self._js_stamps, stamp_ns)
                self._js_stamps.insert(i, stamp_ns)
                self._js_rows.insert(i, row)
            else:
                self._js_stamps.append(stamp_ns)
                self._js_rows.append(row)
            horizon = self._js_stamps[-1] - int(self.keep_s * 1e9)
            cut = max(bisect.bisect_left(self._js_stamps, horizon),
                      len(self._js_stamps) - self.max_joint_states)
            if cut > 0:
                del self._js_stamps[:cut], self._js_rows[:cut]
        return ""

    def restart(self, start_ns: int) -> None:
        """Forget everything; from now on ignore inputs stamped before ``start_ns``."""
        with self._lock:
            self._clear_camera()
            self._js_stamps, self._js_rows = [], []
            self._start_ns = start_ns
            self.generation += 1

    def awaiting_first_frame(self, now_ns: int, window_s: float) -> bool:
        """True while no frame has paired since a restart at most ``window_s`` ago: the new
        task's first observation is on its way (normal at every episode start), not a
        camera that stopped. A clock jump back (bag loop) ends the wait."""
        with self._lock:
            return (not self._frames and self._start_ns is not None
                    and 0 <= now_ns - self._start_ns <= int(window_s * 1e9))

    # -- selection ----------------------------------------------------------------------------

    def select(self, now_ns: int, n_obs_steps: int, dt_s: float, max_age_s: float,
               tolerance_s: float | None = None) -> Selection | Refusal:
        """The frames (oldest first) for a chunk at ``now_ns``, or why there is none.

        ``tolerance_s`` (default ``dt_s / 2``): an older step whose closest frame
        is further than this from its target counts as ``short``.
        """
        tolerance_s = dt_s / 2 if tolerance_s is None else tolerance_s
        max_age_ns = int(max_age_s * 1e9)
        with self._lock:
            if not self._frames:
                pending = len(self._pending_images) + len(self._pending_points)
                detail = ("no observation received yet (observation/image + "
                          "observation/points with equal stamps)")
                if self.images_total or self.points_total:
                    since = "yet"
                    if self._start_ns is not None:
                        since = (f"since the restart for a new task "
                                 f"{(now_ns - self._start_ns) * 1e-9:.3f} s ago")
                    detail = (f"no image+points pair {since} ({self.images_total} images, "
                              f"{self.points_total} clouds received in all, {pending} pending "
                              "without a partner of the same stamp)")
                return Refusal(NO_OBSERVATION, detail)
            newest = self._frames[-1]
            age_ns = now_ns - newest.stamp_ns
            if age_ns > max_age_ns:
                return Refusal(STALE_OBSERVATION,
                               f"newest observation is {age_ns * 1e-9:.3f} s old "
                               f"(max_obs_age_s {max_age_s:g})")
            if -age_ns > max_age_ns:
                return Refusal(FUTURE_OBSERVATION,
                               f"newest observation is stamped {-age_ns * 1e-9:.3f} s in the "
                               "future (clock mismatch between camera and this node?)")
            chosen = [newest]
            offsets = [0.0]
            short = False
            for i in range(1, n_obs_steps):
                target = newest.stamp_ns - int(round(i * dt_s * 1e9))
                frame = self._closest(target)
                offset_s = (frame.stamp_ns - target) * 1e-9
                short = short or abs(offset_s) > tolerance_s
                chosen.append(frame)
                offsets.append(offset_s)
            chosen.reverse()
            offsets.reverse()
            observations = []
            for frame in chosen:
                if not frame.finite:
                    return Refusal(NON_FINITE_POINTS,
                                   f"points of the observation stamped {_fmt(frame.stamp_ns)} "
                                   "contain NaN or inf")
                j = bisect.bisect_right(self._js_stamps, frame.stamp_ns) - 1
                if j < 0:
                    return Refusal(NO_JOINT_STATE,
                                   f"no joint_states at or before the observation stamped "
                                   f"{_fmt(frame.stamp_ns)} ({len(self._js_stamps)} kept)")
                lag_ns = frame.stamp_ns - self._js_stamps[j]
                if lag_ns > max_age_ns:
                    return Refusal(STALE_JOINT_STATE,
                                   f"latest joint_states before the observation stamped "
                                   f"{_fmt(frame.stamp_ns)} is {lag_ns * 1e-9:.3f} s older "
                                   f"(max_obs_age_s {max_age_s:g})")
                q = self._js_rows[j]
                if not np.isfinite(q).all():
                    return Refusal(NON_FINITE_JOINT_STATE,
                                   f"joint_states stamped {_fmt(self._js_stamps[j])} contain "
                                   f"NaN or inf: {q.tolist()}")
                observations.append({"image": frame.image, "points": frame.points,
                                     "point_colors": frame.colors, "joint_positions": q})
            return Selection(newest.stamp_ns, tuple(f.stamp_ns for f in chosen), observations,
                             tuple(offsets), short)

    # -- state --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def newest_stamp_ns(self) -> int | None:
        with self._lock:
            return self._frames[-1].stamp_ns if self._frames else None

    @property
    def pending(self) -> tuple[int, int]:
        """(images, clouds) waiting for their partner."""
        with self._lock:
            return len(self._pending_images), len(self._pending_points)

    # -- internals (lock held) ----------------------------------------------------------------

    def _before_start(self, stamp_ns: int) -> bool:
        """Drop (counted) an input older than the last restart; a jump back by more than
        ``clock_jump_s`` below it is a new clock (bag loop) and lifts the cut."""
        start = self._start_ns
        if start is None or stamp_ns >= start:
            return False
        if stamp_ns < start - int(self.clock_jump_s * 1e9):
            self._start_ns = None
            return False
        self.drops["before_restart"] += 1
        return True

    def _has_frame(self, stamp_ns: int) -> bool:
        i = bisect.bisect_left(self._frame_stamps, stamp_ns)
        return i < len(self._frame_stamps) and self._frame_stamps[i] == stamp_ns

    def _camera_stamp(self, stamp_ns: int) -> None:
        newest = self._newest_camera_ns
        if newest is not None and stamp_ns < newest - int(self.clock_jump_s * 1e9):
            self.drops["clock_jump_camera"] += 1
            self._clear_camera()
            newest = None
        if newest is None or stamp_ns > newest:
            self._newest_camera_ns = stamp_ns

    def _clear_camera(self) -> None:
        self._frames, self._frame_stamps = [], []
        self._pending_images, self._pending_points = {}, {}
        self._newest_camera_ns = None

    def _add_frame(self, frame: Frame) -> None:
        self.paired_total += 1
        if not frame.finite:
            self.non_finite_frames += 1
        i = bisect.bisect_left(self._frame_stamps, frame.stamp_ns)
        self._frame_stamps.insert(i, frame.stamp_ns)
        self._frames.insert(i, frame)
        horizon = self._frame_stamps[-1] - int(self.keep_s * 1e9)
        cut = max(bisect.bisect_left(self._frame_stamps, horizon),
                  len(self._frames) - self.max_frames)
        if cut > 0:
            del self._frames[:cut], self._frame_stamps[:cut]
        self._trim_pending()

    def _trim_pending(self) -> None:
        """Drop halves that can no longer be paired: too old, or too many waiting."""
        limit = None
        if self._frame_stamps:
            limit = self._frame_stamps[-1] - int(self.pair_timeout_s * 1e9)
        for pending, name in ((self._pending_images, "unpaired_image"),
                              (self._pending_points, "unpaired_points")):
            for stamp in sorted(pending):
                if (limit is not None and stamp < limit) or len(pending) > self.max_pending:
                    del pending[stamp]
                    self.drops[name] += 1
                else:
                    break

    def _closest(self, target_ns: int) -> Frame:
        i = bisect.bisect_left(self._frame_stamps, target_ns)
        if i == 0:
            return self._frames[0]
        if i == len(self._frames):
            return self._frames[-1]
        before, after = self._frame_stamps[i - 1], self._frame_stamps[i]
        return self._frames[i - 1] if target_ns - before <= after - target_ns else self._frames[i]


def _fmt(stamp_ns: int) -> str:
    return f"{stamp_ns // 1_000_000_000}.{stamp_ns % 1_000_000_000:09d}"
