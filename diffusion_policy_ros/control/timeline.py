"""Chunk timeline: accept or reject chunks, place them in absolute time, blend them.

Point ``k`` of a chunk is placed at ``stamp + time_from_start[k]``. When the
chunk arrives, points already in the past are dropped (latency compensation
as in ros2_control's joint_trajectory_controller): the arm is never asked to
catch up with where the policy wanted it to be tens of milliseconds ago.

How a new chunk takes over (``blend_strategy``), all without a jump in
position, velocity or acceleration of the target:

* ``latest``: only the newest chunk counts. A quintic splice joins the current
  reference state (position, velocity, acceleration) to the first future
  waypoint at least ``splice_min_lead_s`` ahead; the chunk's spline follows
  (what joint_trajectory_controller does when a trajectory replaces another).
* ``crossfade``: the old plan and the new chunk's spline are mixed with a
  quintic smoothstep over ``blend_window_s`` from the arrival time. Both
  plans are C2 and the smoothstep is flat to second order at both ends, so
  the mix is C2 (a fade that is still running becomes the "old" plan).
* ``ensemble`` (default): ACT-style temporal ensembling. Each future waypoint
  becomes the weighted mean of every live chunk's prediction for that
  instant (each chunk linearly interpolated in time), weight
  ``exp(-ensemble_decay_per_s * age)`` with ``age`` the stamp difference to
  the newest chunk; the ensembled plan is then cross-faded in like
  ``crossfade``. ACT weights the oldest prediction most (``exp(-m i)``, ``i``
  = 0 oldest); here newer chunks weigh more because each is conditioned on a
  newer observation, and a negative decay gives ACT's ordering.

The first chunk after a hold, a fault or start-up is always joined like
``latest``, from the reference state (where the arm is), never from an old plan.

Why ``ensemble`` (window 0.3 s, decay 10/s) is the default: on the seeded
synthetic stream of ``bench.blending`` (sinusoidal joint motion, 16-point
chunks every 100 ms arriving 50-150 ms late, consecutive chunks disagreeing
by ~0.01 rad offsets plus drift, 500 Hz, limits on) it has the lowest steady
tracking error (RMS 0.0076 rad vs 0.0091 crossfade, 0.0109 latest) and no
acceleration steps at chunk switches (peak jerk there 113 rad/s^3 vs 218
crossfade, 4764 latest, whose short splices keep hitting the acceleration
limit). Its price is a slower reaction to a sudden change of plan (RMS
0.021 rad in the following second vs 0.014 latest). Table and rule:
``bench.blending``.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import math

import numpy as np

from diffusion_policy_ros.control.chunk import (
    ActionChunk,
    ChunkRejected,
    RejectReason,
    ValidChunk,
    check_chunk_limits,
    validate_chunk,
)
from diffusion_policy_ros.control.tracker_config import PdTrackerConfig
from diffusion_policy_ros.control.trajectory import (
    CrossFade,
    PiecewiseLinear,
    QuinticSpline,
    WaypointTrajectory,
    knot_derivatives,
)

MAX_ENSEMBLE_CHUNKS = 32


@dataclasses.dataclass(frozen=True)
class ReferenceState:
    """Where the reference is at ``time_s``: the start of a splice."""

    time_s: float
    position: list[float]
    velocity: list[float]
    acceleration: list[float]


@dataclasses.dataclass(frozen=True)
class ChunkDecision:
    """Outcome of ``submit``: accepted (with the number of past points dropped) or why not."""

    accepted: bool
    reason: RejectReason | None = None
    detail: str = ""
    dropped_points: int = 0


class _Prediction:
    """A chunk kept for ensembling: absolute times and ``(n, joints + gripper)`` values."""

    __slots__ = ("stamp_s", "times", "values")

    def __init__(self, valid: ValidChunk):
        self.stamp_s = valid.stamp_s
        self.times = np.asarray(valid.times_s)
        self.values = np.hstack([np.asarray(valid.arm), np.asarray(valid.gripper)[:, None]])


class ActionChunkTimeline:
    """Accepts chunks, keeps the active target trajectory and samples it."""

    def __init__(self, config: PdTrackerConfig):
        config.validate()
        self.config = config
        self._lower = config.reference_lower()
        self._upper = config.reference_upper()
        self.active: WaypointTrajectory | CrossFade | None = None
        self._history: collections.deque[_Prediction] = collections.deque(
            maxlen=MAX_ENSEMBLE_CHUNKS)
        self.last_stamp_s = -math.inf
        self.last_arrival_s = -math.inf
        self.accepted = 0
        self.dropped_points = 0
        self.rejected: collections.Counter[RejectReason] = collections.Counter()
        self.last_rejection: ChunkDecision | None = None

    # -- acceptance ---------------------------------------------------------------------------

    def check(self, chunk: ActionChunk, now_s: float, state_available: bool = True) -> ValidChunk:
        """Validate ``chunk`` at ``now_s``; raise ``ChunkRejected`` (nothing is counted here)."""
        c = self.config
        valid = validate_chunk(chunk, now_s, c.joint_names, c.gripper_joint,
                               c.max_chunk_age_s, c.future_tolerance_s)
        check_chunk_limits(valid, c.joint_names, c.position_lower, c.position_upper,
                           c.chunk_limit_tolerance, c.gripper_min, c.gripper_max,
                           c.gripper_limit_tolerance)
        if valid.stamp_s == self.last_stamp_s:
            raise ChunkRejected(RejectReason.SAME_STAMP,
                                f"stamp {valid.stamp_s:.6f} is the current chunk's: planned "
                                "from the same observation")
        if valid.stamp_s < self.last_stamp_s:
            raise ChunkRejected(RejectReason.NOT_NEWER,
                                f"stamp {valid.stamp_s:.6f} is not newer than the current "
                                f"chunk's {self.last_stamp_s:.6f}")
        if valid.times_s[-1] < now_s:
            raise ChunkRejected(RejectReason.NO_FUTURE_POINTS,
                                f"last point is {now_s - valid.times_s[-1]:.3f} s in the past")
        if not state_available:
            raise ChunkRejected(RejectReason.STATE_UNAVAILABLE,
                                "joint_states missing or stale; chunk not executed")
        return valid

    def reject(self, error: ChunkRejected) -> ChunkDecision:
        decision = ChunkDecision(False, error.reason, error.detail)
        self.rejected[error.reason] += 1
        self.last_rejection = decision
        return decision

    def submit(self, chunk: ActionChunk, now_s: float,
               start: ReferenceState | None) -> ChunkDecision:
        """Check and accept ``chunk``; ``start`` is the reference state (None: no joint state)."""
        try:
            valid = self.check(chunk, now_s, start is not None)
        except ChunkRejected as err:
            return self.reject(err)
        assert start is not None  # check refuses a chunk without one
        return self.accept(valid, now_s, start)

    def accept(self, valid: ValidChunk, now_s: float, start: ReferenceState) -> ChunkDecision:
        """Make a checked chunk the active plan (blending per ``blend_strategy``)."""
        c = self.config
        first = bisect.bisect_left(valid.times_s, now_s)
        times = valid.times_s[first:]
        arm = [self._clamp_arm(row) for row in valid.arm[first:]]
        grip = [min(c.gripper_max, max(c.gripper_min, g)) for g in valid.gripper[first:]]
        self.accepted += 1
        self.dropped_points += first
        self.last_stamp_s = valid.stamp_s
        self.last_arrival_s = now_s
        strategy = c.blend_strategy
        if strategy == "ensemble":
            arm, grip = self._ensemble(valid, times, arm, grip)
        self._history.append(_Prediction(valid))
        if self.active is not None and strategy != "latest":
            new = WaypointTrajectory(QuinticSpline.through_waypoints(times, arm),
                                     PiecewiseLinear(times, grip), valid.stamp_s)
            self.active = CrossFade(self.active.pruned(now_s), new, now_s, c.blend_window_s)
        else:
            self.active = self._splice(start, now_s, times, arm, grip, valid.stamp_s)
        return ChunkDecision(True, dropped_points=first)

    def clear(self) -> None:
        """Forget the plan and the ensemble history (hold, fault); stamps stay ordered."""
        self.active = None
        self._history.clear()

    def reset(self) -> None:
        """Forget everything, including the last stamp (time jumped backwards)."""
        self.clear()
        self.last_stamp_s = -math.inf
        self.last_arrival_s = -math.inf

    # -- sampling -----------------------------------------------------------------------------

    def sample(self, t: float) -> tuple[list[float], list[float], float] | None:
        """Target arm positions, velocities and gripper opening at ``t`` (None: no plan)."""
        active = self.active
        if active is None:
            return None
        if type(active) is CrossFade and t >= active.start_s + active.window_s:
            active = self.active = active.pruned(t)
        pos, vel = active.sample(t)
        return pos, vel, active.gripper_at(t)

    # -- helpers ------------------------------------------------------------------------------

    def _clamp_arm(self, row) -> list[float]:
        return [min(hi, max(lo, x)) for x, lo, hi in zip(row, self._lower, self._upper,
                                                           strict=True)]

    def _splice(self, start: ReferenceState, now_s: float, times, arm, grip,
                stamp_s: float) -> WaypointTrajectory:
        """Quintic join from the reference state to the waypoints ``splice_min_lead_s`` ahead."""
        lead_until = max(now_s, start.time_s) + self.config.splice_min_lead_s
        k0 = bisect.bisect_left(times, lead_until)
        if k0 >= len(times):
            # Every waypoint is too close: aim at the last one, no sooner than the lead time.
            times, arm, grip = (max(times[-1], lead_until),), arm[-1:], grip[-1:]
        else:
            times, arm, grip = times[k0:], arm[k0:], grip[k0:]
        wp = np.asarray(arm, dtype=float)
        vel, acc = knot_derivatives(times, wp)
        knot_t = [start.time_s, *times]
        knot_p = np.vstack([start.position, wp])
        knot_v = np.vstack([start.velocity, vel])
        knot_a = np.vstack([start.acceleration, acc])
        spline = QuinticSpline(knot_t, knot_p, knot_v, knot_a)
        return WaypointTrajectory(spline, PiecewiseLinear(times, grip), stamp_s)

    def _ensemble(self, valid: ValidChunk, times, arm, grip):
        """Weighted mean, per future waypoint, of every live chunk's prediction.

        Each live chunk is linearly interpolated at the new chunk's times; chunks
        of equal length are evaluated together (one batch of numpy operations).
        """
        decay = self.config.ensemble_decay_per_s
        live = [h for h in self._history if h.times[-1] >= times[0]]
        self._history = collections.deque(live, maxlen=MAX_ENSEMBLE_CHUNKS)
        t = np.asarray(times)
        total = np.ones(len(t))
        mean = np.hstack([np.asarray(arm), np.asarray(grip)[:, None]])
        by_length: dict[int, list[_Prediction]] = {}
        for h in live:
            by_length.setdefault(len(h.times), []).append(h)
        for n, group in by_length.items():
            ht = np.stack([h.times for h in group])            # (C, n)
            hv = np.stack([h.values for h in group])           # (C, n, channels)
            w = np.exp(-decay * (valid.stamp_s - np.array([h.stamp_s for h in group])))
            covered = (t[None, :] >= ht[:, :1]) & (t[None, :] <= ht[:, -1:])  # (C, m)
            if n == 1:
                pred = np.broadcast_to(hv[:, :1, :], (len(group), len(t), hv.shape[2]))
            else:
                k = (t[None, :, None] >= ht[:, None, :]).sum(axis=2) - 1  # (C, m)
                k = np.minimum(np.maximum(k, 0), n - 2)
                t0 = np.take_along_axis(ht, k, axis=1)
                t1 = np.take_along_axis(ht, k + 1, axis=1)
                u = ((t[None, :] - t0) / (t1 - t0))[:, :, None]
                v0 = np.take_along_axis(hv, k[:, :, None], axis=1)
                v1 = np.take_along_axis(hv, k[:, :, None] + 1, axis=1)
                pred = v0 + u * (v1 - v0)
            wc = w[:, None] * covered                                  # (C, m)
            mean += (wc[:, :, None] * pred).sum(axis=0)
            total += wc.sum(axis=0)
        mean /= total[:, None]
        c = self.config
        out_arm = [self._clamp_arm(row) for row in mean[:, :-1].tolist()]
        out_grip = [min(c.gripper_max, max(c.gripper_min, g)) for g in mean[:, -1].tolist()]
        return out_arm, out_grip
