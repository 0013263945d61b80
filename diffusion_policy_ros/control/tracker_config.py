"""``PdTrackerConfig``: parameters of ``pd_tracker_node`` (``config/pd_tracker.yaml``).

Defaults suit a UR5e-like arm (effort limits 150/150/150/28/28/28 N m,
180 deg/s joints, +-2 pi joints with the elbow at +-pi) with a 0..85 mm
parallel gripper. The PD gains are a conservative starting point; tune them on
the arm (or the simulated model) being driven.
"""

from __future__ import annotations

import dataclasses
import math

from diffusion_policy_ros.config import param

BLEND_STRATEGIES = ("latest", "ensemble", "crossfade")
"""How a new chunk takes over from the current one (see ``timeline``)."""

TICK_SOURCES = ("auto", "timer", "joint_states")
"""What runs the control law (see ``PdTrackerConfig.tick_source``)."""

TWO_PI = 2.0 * math.pi


@dataclasses.dataclass
class PdTrackerConfig:
    """Parameters of ``pd_tracker_node``; every per-joint list follows ``joint_names``."""

    joint_names: list = param(
        ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6"],
        "Arm joints in command order (arm_controller/commands efforts follow this order)")
    gripper_joint: str = param("gripper_joint", "Name of the gripper column in action chunks "
                               "and joint_states (value = opening in m)")
    rate_hz: float = param(500.0, "Control rate: reference, PD and commands (Hz)",
                           low=1.0, high=2000.0)
    reference_rate_hz: float = param(
        50.0, "tracker/reference rate (Hz; rate_hz or more: every tick). A plotting topic, "
        "not part of the loop: each message costs a publish and a callback per subscriber",
        low=1.0, high=10000.0)
    gripper_keepalive_s: float = param(
        0.1, "gripper_controller/commands goes out when the opening changes and unchanged "
        "at least this often (s; 0 = every tick): a position-controlled gripper holds its "
        "last command", low=0.0, high=10.0)
    tick_source: str = param(
        "auto", "What runs the control law. timer: a steady-clock timer at rate_hz (a real "
        "arm's driver); joint_states: one tick per joint_states message at its stamp, the "
        "simulator's synchronous mode (with sim_node's lockstep the physics waits for each "
        "command); auto: joint_states under use_sim_time, else timer", choices=TICK_SOURCES)
    realtime_priority: int = param(
        50, "pd_tracker_node: SCHED_FIFO priority (1-99) of its control loop (on the timer, "
        "the callbacks' thread runs one below), as ros2_control's controller manager runs "
        "its loop; 0 = normal scheduling. Needs CAP_SYS_NICE or an rtprio limit; without "
        "them the node warns and runs normally", low=0, high=99)
    kp: list = param([600.0, 600.0, 400.0, 100.0, 100.0, 50.0],
                     "Proportional gain per joint (N m/rad)", low=0.0, high=1.0e5)
    kd: list = param([40.0, 40.0, 30.0, 8.0, 8.0, 4.0],
                     "Derivative gain per joint (N m s/rad)", low=0.0, high=1.0e4)
    inertia_feedforward: list = param(
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "Effort feedforward per unit reference acceleration "
        "(approximate joint inertia, kg m^2); 0 = off", low=0.0, high=100.0)
    effort_limits: list = param([150.0, 150.0, 150.0, 28.0, 28.0, 28.0],
                                "Effort saturation per joint, +-(N m)", low=0.0, high=1.0e4)
    position_lower: list = param([-TWO_PI, -TWO_PI, -math.pi, -TWO_PI, -TWO_PI, -TWO_PI],
                                 "Lower joint limits (rad)", low=-100.0, high=100.0)
    position_upper: list = param([TWO_PI, TWO_PI, math.pi, TWO_PI, TWO_PI, TWO_PI],
                                 "Upper joint limits (rad)", low=-100.0, high=100.0)
    position_margin: float = param(0.05, "The reference stays this far inside the joint "
                                   "limits (rad)", low=0.0, high=1.0)
    velocity_limits: list = param([math.pi] * 6, "The arm's speed limit per joint (rad/s): "
                                  "the measured arm stays under it (see velocity_fraction)",
                                  low=0.01, high=100.0)
    velocity_fraction: float = param(
        0.8, "Share of velocity_limits that the reference moves at and that the efforts let "
        "the measured arm reach; the rest is headroom for tracking overshoot and the "
        "coupling of joints moving together, so the measured arm stays under "
        "velocity_limits", low=0.1, high=1.0)
    acceleration_limits: list = param([10.0] * 6, "Reference acceleration limit per joint "
                                      "(rad/s^2)", low=0.01, high=1000.0)
    braking_fraction: float = param(
        0.5, "Share of acceleration_limits used to brake: when closing in on a target, in "
        "front of a position limit and when holding; the rest is headroom for the target's "
        "own acceleration", low=0.1, high=0.9)
    gripper_min: float = param(0.0, "Smallest commanded gripper opening (m)",
                               low=0.0, high=1.0)
    gripper_max: float = param(0.085, "Largest commanded gripper opening (m)",
                               low=0.0, high=1.0)
    gripper_rate: float = param(0.1, "Gripper opening rate limit (m/s)", low=1.0e-4,
                                high=10.0)
    chunk_limit_tolerance: float = param(
        0.02, "A chunk with an arm point farther than this outside [position_lower, "
        "position_upper] is rejected whole (out_of_limits), as a trajectory controller "
        "rejects a trajectory beyond its joint limits; points within it are clamped to the "
        "reference limits (rad)", low=0.0, high=1.0)
    gripper_limit_tolerance: float = param(
        0.005, "A chunk with a gripper opening farther than this outside [gripper_min, "
        "gripper_max] is rejected whole (out_of_limits) (m)", low=0.0, high=1.0)
    chunk_timeout_s: float = param(
        0.5, "No accepted chunk for this long: decelerate within the limits and hold (s)",
        low=0.01, high=60.0)
    state_timeout_s: float = param(
        0.1, "joint_states older than this: zero effort once, fault until they return (s)",
        low=0.001, high=10.0)
    state_future_tolerance_s: float = param(
        0.2, "joint_states stamped further than this ahead of the node's clock are dropped "
        "and counted (a publisher on another clock); ones stamped before the newest state "
        "taken are dropped too (control.joint_states says when a restarted publisher is "
        "followed again) (s)", low=0.0, high=10.0)
    late_state_s: float = param(
        0.01, "joint_states older than this (but within state_timeout_s): feedback on a "
        "stale state is what destabilises a loop closed over a late link, so the tracker "
        "commands zero effort (the drive's gravity compensation holds the arm's weight) "
        "while the reference goes on along the plan, until states are fresh (s; 0 = off)",
        low=0.0, high=10.0)
    overspeed_factor: float = param(
        1.5, "A measured joint speed above this multiple of velocity_limits: unsafe-speed "
        "stop, damping only and chunks rejected until every joint is below "
        "overspeed_resume_rad_s, then hold at the measured state (0 = off)",
        low=0.0, high=100.0)
    overspeed_resume_rad_s: float = param(
        0.05, "Unsafe-speed stop ends when every joint is slower than this (rad/s)",
        low=0.001, high=100.0)
    blend_strategy: str = param(
        "ensemble", "How a new chunk takes over. ensemble (default): ACT-style exponentially "
        "weighted mean of all live chunks, cross-faded in; crossfade: the newest chunk's plan "
        "cross-faded in; latest: newest chunk only, joined from the current reference state. "
        "Default chosen by bench.blending.compare_blending: lowest tracking error and "
        "lowest jerk at chunk switches on the seeded synthetic stream (latest and crossfade "
        "react faster to a sudden plan change)", choices=BLEND_STRATEGIES)
    blend_window_s: float = param(0.3, "ensemble/crossfade: length of the quintic cross-fade "
                                  "from the old plan to the new one (s)", low=0.002, high=1.0)
    ensemble_decay_per_s: float = param(
        10.0, "ensemble: weight of a chunk is exp(-decay * (newest stamp - its stamp)); "
        "> 0 favours newer chunks (faster reaction), 0 = plain mean, < 0 favours older ones "
        "as ACT's exp(-m i) does (1/s)", low=-50.0, high=200.0)
    splice_min_lead_s: float = param(
        0.05, "latest (and the first chunk after a hold): waypoints closer than this to now "
        "are skipped when joining from the current reference state (s)", low=0.0, high=1.0)
    max_chunk_age_s: float = param(
        0.5, "Chunks whose stamp is older than this are rejected as stale (s)",
        low=0.0, high=10.0)
    future_tolerance_s: float = param(
        0.05, "Chunks stamped further than this in the future are rejected (clock mismatch) (s)",
        low=0.0, high=10.0)
    resume_resync_tolerance: float = param(
        0.1, "On resuming after a hold, a joint farther than this from the held reference "
        "(pushed, blocked, sagging) restarts the reference at the measured state (rad)",
        low=0.0, high=10.0)
    path_tolerance: float = param(
        0.3, "A joint farther than this from its reference while tracking or holding "
        "(blocked, pushed hard, or put elsewhere by a simulator reset): drop the plan and "
        "restart arm and gripper references at the measured state, holding, as a trajectory "
        "controller aborts on its path tolerance (rad; 0 = off)", low=0.0, high=10.0)

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    def validate(self) -> None:
        n = len(self.joint_names)
        if n == 0:
            raise ValueError("joint_names is empty")
        if not all(isinstance(name, str) and name for name in self.joint_names):
            raise ValueError(f"joint_names must be non-empty strings, got {self.joint_names}")
        if len(set(self.joint_names)) != n:
            raise ValueError(f"joint_names has duplicates: {self.joint_names}")
        if self.gripper_joint in self.joint_names:
            raise ValueError(f"gripper_joint '{self.gripper_joint}' is also an arm joint")
        for name in ("kp", "kd", "inertia_feedforward", "effort_limits", "position_lower",
                     "position_upper", "velocity_limits", "acceleration_limits"):
            value = getattr(self, name)
            if len(value) != n:
                raise ValueError(f"{name} has {len(value)} values for {n} joints")
        for j, (lo, hi) in enumerate(zip(self.position_lower, self.position_upper, strict=True)):
            if lo + self.position_margin >= hi - self.position_margin:
                raise ValueError(f"joint {self.joint_names[j]}: position limits [{lo}, {hi}] "
                                 f"leave no room inside position_margin {self.position_margin}")
        if self.gripper_min >= self.gripper_max:
            raise ValueError(f"gripper_min {self.gripper_min} must be < gripper_max "
                             f"{self.gripper_max}")
        if self.blend_strategy not in BLEND_STRATEGIES:
            raise ValueError(f"blend_strategy must be one of {BLEND_STRATEGIES}")
        if self.tick_source not in TICK_SOURCES:
            raise ValueError(f"tick_source must be one of {TICK_SOURCES}")
        if self.late_state_s and self.late_state_s >= self.state_timeout_s:
            raise ValueError(f"late_state_s ({self.late_state_s}) must be below "
                             f"state_timeout_s ({self.state_timeout_s})")

    def reference_velocity_limits(self) -> list[float]:
        return [self.velocity_fraction * v for v in self.velocity_limits]

    def reference_lower(self) -> list[float]:
        return [lo + self.position_margin for lo in self.position_lower]

    def reference_upper(self) -> list[float]:
        return [hi - self.position_margin for hi in self.position_upper]
