"""``PdTracker``: chunk stream in, smooth limited reference and PD efforts out, every tick.

The ROS node is a thin shell around this class: it converts each
``policy/action_chunk`` message to an ``ActionChunk`` and calls
``submit_chunk(chunk, now_s)``; on its ``rate_hz`` timer it calls
``tick(now_s, q, qd, state_stamp_s, gripper_opening_m)`` with the latest
``joint_states`` (arm joints in ``joint_names`` order) and publishes the
returned ``TrackerCommand`` when ``command.send`` is true. No clock is read in
here; every call gets the time. Not thread-safe: call ``submit_chunk`` and
``tick`` from one thread (in rclpy: one mutually exclusive callback group).
``diagnostics()`` returns the counters for ``/diagnostics``.

Modes:

* ``holding`` (start-up, after ``chunk_timeout_s`` without an accepted chunk,
  after a fault): the reference brakes within the limits and stays where it
  stopped; the arm is held there by the PD law. The next accepted chunk
  starts from the reference (from the measured state when the arm is farther
  than ``resume_resync_tolerance`` from it), never from an old chunk's plan.
* ``tracking``: the reference follows the timeline's target through the
  ``ReferenceLimiter``.
* path abort: a joint farther than ``path_tolerance`` from the reference (the
  arm blocked or pushed hard, or put elsewhere by a simulator reset) drops the
  plan and restarts arm and gripper references at the measured state, holding;
  without it a reset arm would be pulled back to where the last episode ended.
  Chunks conditioned on observations from before the abort are rejected.
* ``fault`` (no joint state, NaN/inf in it, or older than ``state_timeout_s``):
  zero effort is commanded once, then nothing, and chunks are rejected; when
  fresh states return, the reference restarts at the measured state, holding.
* late state (older than ``late_state_s``, within ``state_timeout_s``): any
  feedback on a stale state, position or velocity, is delayed feedback, which makes
  a stiff effort loop oscillate (damping alone too: kd / inertia times the delay
  soon exceeds what a delayed damper tolerates). So the effort is zero, which the
  drive's gravity compensation turns into a coast that the joints' own friction
  slows, while the reference goes on along the plan; fresh states restore the PD
  law (a gap beyond ``path_tolerance`` by then aborts the path as usual).
* unsafe-speed stop (a measured joint, from a fresh state, faster than
  ``overspeed_factor`` x its velocity limit): ``fault`` with damping-only efforts
  (-kd qd), sent every tick, chunks rejected, until every joint is below
  ``overspeed_resume_rad_s``; then holding at the measured state.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence

from diffusion_policy_ros.control.chunk import ActionChunk, ChunkRejected, RejectReason
from diffusion_policy_ros.control.limits import (
    GripperRateLimiter,
    MeasuredStateLimits,
    ReferenceLimiter,
)
from diffusion_policy_ros.control.pd import pd_effort
from diffusion_policy_ros.control.timeline import (
    ActionChunkTimeline,
    ChunkDecision,
    ReferenceState,
)
from diffusion_policy_ros.control.tracker_config import PdTrackerConfig

MAX_STEP_PERIODS = 10
"""A tick integrates at most this many control periods (a stalled timer catches up smoothly)."""


def _floats(values) -> list[float]:
    if type(values) is list:
        return values
    tolist = getattr(values, "tolist", None)
    return tolist() if tolist is not None else list(values)


class TrackerMode(enum.StrEnum):
    TRACKING = "tracking"
    HOLDING = "holding"
    FAULT = "fault"


@dataclasses.dataclass(frozen=True, slots=True)
class TrackerCommand:
    """What to publish after one tick."""

    effort_nm: tuple[float, ...]
    """Arm efforts in ``joint_names`` order (arm_controller/commands)."""
    gripper_opening_m: float | None
    """Gripper command (gripper_controller/commands); None until an opening is known."""
    q_ref: tuple[float, ...]
    qd_ref: tuple[float, ...]
    mode: TrackerMode
    send: bool
    """Publish this command. False only in a fault after its single zero-effort command."""
    fault: str = ""
    """Why the tracker is in fault ('' otherwise)."""


class PdTracker:
    """Combines ``ActionChunkTimeline``, ``ReferenceLimiter``, gripper limiter and PD law."""

    def __init__(self, config: PdTrackerConfig):
        config.validate()
        self.config = config
        self.timeline = ActionChunkTimeline(config)
        self.limiter = ReferenceLimiter(config.reference_lower(), config.reference_upper(),
                                        config.reference_velocity_limits(),
                                        config.acceleration_limits, config.braking_fraction)
        self.gripper = GripperRateLimiter(config.gripper_min, config.gripper_max,
                                          config.gripper_rate)
        self.state_limits = MeasuredStateLimits(config.position_lower, config.position_upper,
                                                config.reference_velocity_limits(),
                                                config.acceleration_limits, config.kd)
        self.n = config.num_joints
        self._kp = [float(x) for x in config.kp]
        self._kd = [float(x) for x in config.kd]
        self._effort_limits = [float(x) for x in config.effort_limits]
        self._inertia_ff = [float(x) for x in config.inertia_feedforward]
        self._use_inertia_ff = any(self._inertia_ff)
        self._max_step_s = MAX_STEP_PERIODS / config.rate_hz
        self.mode = TrackerMode.FAULT
        self.fault = "no joint_states yet"
        self._fault_sent = False
        self._last_tick_s: float | None = None
        self._q: list[float] | None = None
        self._qd: list[float] | None = None
        self.ticks = 0
        self.faults = 0
        self.holds = 0
        self.resyncs = 0
        self.path_aborts = 0
        self.position_jumps = 0
        self._path_abort_s = -math.inf
        self.effort_saturated_ticks = 0
        self.reference_limited_ticks = 0
        self.state_limited_ticks = 0
        self.late_state_ticks = 0
        self.overspeed_stops = 0
        self._braking = False
        self._speed_limits = [config.overspeed_factor * v for v in config.velocity_limits]

    # -- chunks -------------------------------------------------------------------------------

    def submit_chunk(self, chunk: ActionChunk, now_s: float) -> ChunkDecision:
        """Accept ``chunk`` into the timeline or reject it with a reason (counted)."""
        tl = self.timeline
        ready = self.mode is not TrackerMode.FAULT and self._last_tick_s is not None
        try:
            if chunk.stamp_s <= self._path_abort_s:
                raise ChunkRejected(RejectReason.BEFORE_PATH_ABORT,
                                    f"observation stamp {chunk.stamp_s:.6f} precedes the path "
                                    f"abort at {self._path_abort_s:.6f}: planned from a state "
                                    "the arm has left")
            valid = tl.check(chunk, now_s, ready)
        except ChunkRejected as err:
            return tl.reject(err)
        assert self._last_tick_s is not None  # check refuses a chunk unless ready
        lim = self.limiter
        if self.mode is TrackerMode.HOLDING:
            q, qd = self._q, self._qd
            assert q is not None and qd is not None  # set by the tick that left FAULT
            tol = self.config.resume_resync_tolerance
            if any(abs(a - b) > tol for a, b in zip(q, lim.position, strict=True)):
                lim.reset(q, qd, 1.0 / self.config.rate_hz)
                self.resyncs += 1
            self.mode = TrackerMode.TRACKING
        start = ReferenceState(self._last_tick_s, list(lim.position), list(lim.velocity),
                               list(lim.acceleration))
        return tl.accept(valid, now_s, start)

    # -- control ------------------------------------------------------------------------------

    def tick(self, now_s: float, q: Sequence[float] | None, qd: Sequence[float] | None,
             state_stamp_s: float | None, gripper_opening_m: float | None = None,
             effort_feedforward: Sequence[float] | None = None) -> TrackerCommand:
        """One control step at ``now_s`` with the latest joint state (arm joints in order).

        ``gripper_opening_m`` (measured) seeds the gripper reference; ``effort_feedforward``
        (e.g. gravity compensation, N m) is added before saturation.
        """
        fault = self._state_fault(now_s, q, qd, state_stamp_s)
        if fault:
            return self._fault_tick(now_s, fault)
        assert state_stamp_s is not None  # else a fault
        q, qd = _floats(q), _floats(qd)
        late_s = self.config.late_state_s
        late = bool(late_s) and now_s - state_stamp_s > late_s
        if self._braking or (not late and self._overspeed(qd)):
            return self._braking_tick(now_s, q, qd, gripper_opening_m, late)
        lim = self.limiter
        if self.mode is TrackerMode.FAULT or self._last_tick_s is None:
            self._restart(q, qd, gripper_opening_m)
            dt = 0.0
        else:
            dt = now_s - self._last_tick_s
            if dt < 0.0:
                # Time went backwards (sim reset, bag loop): drop everything, hold here.
                self.timeline.reset()
                self._restart(q, qd, gripper_opening_m)
                dt = 0.0
            elif dt > self._max_step_s:
                dt = self._max_step_s
        self._last_tick_s = now_s
        previous_q = self._q
        self._q, self._qd = q, qd
        if self.gripper.opening is None and gripper_opening_m is not None:
            self.gripper.reset(gripper_opening_m)
        tol = self.config.path_tolerance
        if tol > 0.0 and any(abs(a - b) > tol for a, b in zip(q, lim.position, strict=True)):
            if self._jumped(q, previous_q, dt):
                self.position_jumps += 1
            self.timeline.clear()
            self._restart(q, qd, gripper_opening_m, reseed_gripper=True)
            self.path_aborts += 1
            self._path_abort_s = now_s
            dt = 0.0
        if (self.mode is TrackerMode.TRACKING
                and now_s - self.timeline.last_arrival_s > self.config.chunk_timeout_s):
            self.mode = TrackerMode.HOLDING
            self.timeline.clear()
            self.holds += 1
        if dt > 0.0:
            if self.mode is TrackerMode.TRACKING:
                target = self.timeline.sample(now_s)
                assert target is not None  # TRACKING has a plan
                lim.step(dt, target[0], target[1])
                self.gripper.step(dt, target[2])
                if lim.saturated:
                    self.reference_limited_ticks += 1
            else:
                lim.hold(dt)
        ff = effort_feedforward
        if self._use_inertia_ff:
            base = ff if ff is not None else [0.0] * self.n
            ff = [f + m * a for f, m, a in zip(base, self._inertia_ff, lim.acceleration,
                                               strict=True)]
        if late:
            self.late_state_ticks += 1
            effort, saturated = [0.0] * self.n, False
        else:
            effort, saturated = pd_effort(lim.position, lim.velocity, q, qd, self._kp,
                                          self._kd, self._effort_limits, ff)
            if self.state_limits.bound(effort, q, qd, self._effort_limits, ff):
                self.state_limited_ticks += 1
        self.ticks += 1
        if saturated:
            self.effort_saturated_ticks += 1
        return TrackerCommand(tuple(effort), self.gripper.opening, tuple(lim.position),
                              tuple(lim.velocity), self.mode, True)

    # -- helpers ------------------------------------------------------------------------------

    def _state_fault(self, now_s, q, qd, stamp) -> str:
        if q is None or qd is None or stamp is None:
            return "no joint_states yet"
        if len(q) != self.n or len(qd) != self.n:
            raise ValueError(f"expected {self.n} joint positions and velocities, got "
                             f"{len(q)} and {len(qd)}")
        age = now_s - stamp
        if age > self.config.state_timeout_s:
            return f"joint_states are {age:.3f} s old (state_timeout_s " \
                   f"{self.config.state_timeout_s})"
        if not all(map(math.isfinite, q)) or not all(map(math.isfinite, qd)):
            return "joint_states contain NaN/inf"
        return ""

    def _overspeed(self, qd: list[float]) -> bool:
        if not self.config.overspeed_factor:
            return False
        for name, v, limit in zip(self.config.joint_names, qd, self._speed_limits, strict=True):
            if abs(v) > limit:
                self.overspeed_stops += 1
                self.fault = (f"unsafe speed: {name} at {v:+.2f} rad/s, limit {limit:.2f} "
                              f"(overspeed_factor x velocity_limits)")
                return True
        return False

    def _jumped(self, q: list[float], previous_q: list[float] | None, dt: float) -> bool:
        """The measured arm moved farther since the last tick than it can at its
        unsafe speed: it was put there (a simulator reset), not pushed or blocked."""
        if previous_q is None:
            return False
        reach = [max(self.config.path_tolerance, s * dt) for s in self._speed_limits]
        return any(abs(a - b) > r for a, b, r in zip(q, previous_q, reach, strict=True))

    def _damping(self, q: list[float], qd: list[float]) -> list[float]:
        """-kd qd, saturated: the PD law with the reference at the arm, at rest."""
        return pd_effort(q, [0.0] * self.n, q, qd, self._kp, self._kd, self._effort_limits)[0]

    def _braking_tick(self, now_s, q, qd, gripper_opening_m, late: bool) -> TrackerCommand:
        """Unsafe-speed stop: damping only (zero on a late state) until every joint is
        slow, then hold there."""
        self._last_tick_s = now_s
        self._q, self._qd = q, qd
        self.ticks += 1
        if late:
            self.late_state_ticks += 1
        elif self._braking and all(abs(v) < self.config.overspeed_resume_rad_s for v in qd):
            self._braking = False
            self.timeline.clear()
            self._restart(q, qd, gripper_opening_m)
            return TrackerCommand((0.0,) * self.n, self.gripper.opening, tuple(q),
                                  (0.0,) * self.n, self.mode, True)
        if not self._braking:
            self._braking = True
            self.faults += 1
            self.timeline.clear()
        self.mode = TrackerMode.FAULT
        self._fault_sent = False  # a state fault during the stop still sends its zero effort
        effort = (0.0,) * self.n if late else tuple(self._damping(q, qd))
        return TrackerCommand(effort, self.gripper.opening, tuple(q),
                              (0.0,) * self.n, TrackerMode.FAULT, True, self.fault)

    def _fault_tick(self, now_s: float, reason: str) -> TrackerCommand:
        if self.mode is not TrackerMode.FAULT:
            self.mode = TrackerMode.FAULT
            self.faults += 1
            self._fault_sent = False
            self.timeline.clear()
        self.fault = reason
        send = not self._fault_sent
        self._fault_sent = True
        self._last_tick_s = now_s
        self.ticks += 1
        lim = self.limiter
        return TrackerCommand((0.0,) * self.n, self.gripper.opening, tuple(lim.position),
                              (0.0,) * self.n, TrackerMode.FAULT, send, reason)

    def _restart(self, q, qd, gripper_opening_m, reseed_gripper: bool = False) -> None:
        """Reference at the measured state, holding (start-up, fault recovery, time reset).

        The gripper reference is kept once known (the gripper holds its own position
        while the arm is in fault), so its command never jumps; ``reseed_gripper`` (a
        path abort) restarts it at the measured opening too.
        """
        self.limiter.reset(q, qd, 1.0 / self.config.rate_hz)
        if (reseed_gripper or self.gripper.opening is None) and gripper_opening_m is not None:
            self.gripper.reset(gripper_opening_m)
        self.mode = TrackerMode.HOLDING
        self.fault = ""

    def diagnostics(self) -> dict:
        """Counters and state for /diagnostics."""
        tl = self.timeline
        last = tl.last_rejection
        return {
            "mode": self.mode.value,
            "fault": self.fault,
            "ticks": self.ticks,
            "chunks_accepted": tl.accepted,
            "chunks_rejected": {r.value: n for r, n in sorted(tl.rejected.items(),
                                                               key=lambda kv: kv[0].value)},
            "last_rejection": (f"{last.reason.value}: {last.detail}"
                               if last and last.reason else ""),
            "points_dropped": tl.dropped_points,
            "faults": self.faults,
            "holds": self.holds,
            "resyncs": self.resyncs,
            "path_aborts": self.path_aborts,
            "position_jumps": self.position_jumps,
            "effort_saturated_ticks": self.effort_saturated_ticks,
            "reference_limited_ticks": self.reference_limited_ticks,
            "state_limited_ticks": self.state_limited_ticks,
            "late_state_ticks": self.late_state_ticks,
            "overspeed_stops": self.overspeed_stops,
            "blend_depth": tl.active.depth if tl.active is not None else 0,
        }
