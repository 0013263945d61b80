"""``JointStateCache``: the newest valid joint state in the tracker's joint order.

The tracker acts on one state, the newest. A sample that arrives stamped older than a
state already taken (a second publisher replaying old states, a DDS queue released late)
or stamped ahead of the node's clock is dropped and counted: taken as the current state,
an old sample reads as a large position error (path aborts, effort spikes) and a future
one makes every true sample after it look old. A publisher that restarted its clock (a
restarted simulator, a looping bag) is followed again once its samples have come in
order among themselves for ``RESYNC_AFTER_S`` with none in order with the newest taken:
the tracker is in its stale-state fault by then anyway. Replayed samples of mixed ages
never qualify, however long the true publisher stalls.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence

from diffusion_policy_ros.joint_state_layout import joint_state_layout

RESYNC_AFTER_S = 1.0
"""Samples older than the newest taken, in order among themselves and alone for this
long (monotonic s): their publisher's clock went back, and the cache follows it."""


class StateDrop(enum.Enum):
    """Why a joint_states sample was not taken; ``value`` is its counter key."""

    MALFORMED = "bad_joint_states"
    OUT_OF_ORDER = "joint_states_out_of_order"
    FUTURE = "joint_states_from_future"


@dataclasses.dataclass(frozen=True)
class JointSample:
    """One joint_states message in the tracker's joint order."""

    q_rad: list[float]
    qd_rad_s: list[float]
    gripper_opening_m: float | None
    stamp_s: float


class JointStateCache:
    """Newest joint state in the tracker's joint order (pure; the node feeds it messages).

    ``latest`` is replaced by one assignment, so a control thread reading it never sees
    half of an update.
    """

    def __init__(self, joint_names: Sequence[str], gripper_joint: str,
                 future_tolerance_s: float, resync_after_s: float = RESYNC_AFTER_S):
        self.joint_names = list(joint_names)
        self.gripper_joint = gripper_joint
        self.future_tolerance_s = future_tolerance_s
        self.resync_after_s = resync_after_s
        self.latest: JointSample | None = None
        # The out-of-order samples' own timeline: newest stamp, since when in order.
        self._behind_stamp_s = -math.inf
        self._behind_since_s = math.inf
        self.time_resyncs = 0

    def update(self, names, positions, velocities, stamp_s: float, clock_s: float | None,
               arrival_s: float) -> tuple[StateDrop | None, str]:
        """Take a joint_states sample; returns ``(None, "")`` or why it was dropped.

        ``clock_s`` is the node's clock (None while it is unset, e.g. before the first
        ``/clock`` on sim time); ``arrival_s`` a monotonic time of arrival.
        """
        order, problem = joint_state_layout(self.joint_names, names, positions, velocities)
        if problem:
            return StateDrop.MALFORMED, problem
        if clock_s is not None and stamp_s - clock_s > self.future_tolerance_s:
            return (StateDrop.FUTURE,
                    f"joint_states stamped {stamp_s - clock_s:.3f} s ahead of the clock "
                    f"(state_future_tolerance_s {self.future_tolerance_s:g})")
        latest = self.latest
        if latest is not None and stamp_s < latest.stamp_s:
            if stamp_s < self._behind_stamp_s or self._behind_since_s == math.inf:
                self._behind_since_s = arrival_s  # the first, or not one timeline
            self._behind_stamp_s = stamp_s
            if arrival_s - self._behind_since_s <= self.resync_after_s:
                return (StateDrop.OUT_OF_ORDER,
                        f"joint_states stamped {latest.stamp_s - stamp_s:.3f} s before the "
                        "newest one taken")
            self.time_resyncs += 1
        q = [float(positions[i]) for i in order]
        qd = [float(velocities[i]) for i in order] if velocities else [0.0] * len(order)
        gripper = latest.gripper_opening_m if latest is not None else None
        if self.gripper_joint in names:
            opening = float(positions[list(names).index(self.gripper_joint)])
            if math.isfinite(opening):
                gripper = opening
        self.latest = JointSample(q, qd, gripper, stamp_s)
        self._behind_stamp_s, self._behind_since_s = -math.inf, math.inf
        return None, ""
