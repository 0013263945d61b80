"""``GraspRetry``: re-open a gripper whose grasp went wrong, so the policy grasps again.

Two ways a grasp of the shipped policy goes wrong and stays wrong (docs/rl.md measures
both):

- **Closed on nothing.** The fingers missed the object, or it slipped out, and the
  gripper closed to a few millimetres. No demonstration starts from there, so the
  policy holds still. Re-opening is safe: an opening below the narrowest object the
  robot is asked to grasp (``empty_below_m``) means the fingers hold nothing.
- **Stalled on an edge.** The fingers met a cube across two of its corners: the
  opening stops at the diagonal (55-70 mm for a 40-50 mm cube), wider than any flat
  grasp the policy has seen, so it never lifts; it drags the cube along the table.
  Recognised by a part-closed opening (``empty_below_m`` .. ``stalled_below_m``) that
  has not moved by more than ``stall_tolerance_m`` for ``stalled_for_s`` while the
  tool centre point is below ``stalled_tool_below_m`` in the arm's base frame (the
  table top is z = 0 there): what the fingers hold still rests on the table, so
  re-opening drops nothing. Needs the tool's position (forward kinematics of the
  measured joints); without it this trigger is off.

Either way the chunks' gripper column is set to ``open_to_m`` for ``open_for_s``, then
the policy's own commands return; from an open gripper beside its object the policy
grasps again. A gripper closed on nothing keeps the policy's arm columns. A stalled one
would close on the same corners again, so for it the arm columns also raise the tool
by ``stall_lift_m`` from where it stalled (the Jacobian's z row by finite differences
of ``tool_position``, least-norm joint step), starting ``RELEASE_S`` after the
re-opening so the cube is let go on the table first: the policy then comes down again
from above, as in its demonstrations. At most ``max_retries`` re-openings of the first
kind and ``max_stall_retries`` of the second per task (a new instruction or episode
starts a new task). Times are the observations' stamps (sim or robot time).
``policy_node``, ``dpr eval`` and ``dpr finetune``'s rollouts run the same rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

#: Stamps this close count as equal (s): 10 Hz observations reach 0.5 s exactly.
_STAMP_TOLERANCE_S = 1e-6
#: After a stalled grasp is re-opened, the lift starts this much later (s): the fingers
#: clear the object first, so it stays on the table.
RELEASE_S = 0.3
#: Joint step for the finite-difference Jacobian (rad).
_JACOBIAN_STEP_RAD = 1e-4


@dataclasses.dataclass
class GraspRetryConfig:
    enabled: bool = True
    #: An opening below this holds nothing (half the narrowest object here, 40 mm).
    empty_below_m: float = 0.02
    #: How long the gripper must stay closed on nothing before it is re-opened (s).
    empty_for_s: float = 0.5
    #: How long the gripper is held open before the policy's commands return (s).
    open_for_s: float = 1.0
    #: The opening commanded meanwhile (m; the gripper's stroke).
    open_to_m: float = 0.085
    #: Re-openings of a gripper closed on nothing per task; then the policy's commands stand.
    max_retries: int = 1
    #: A part-closed opening is one from ``empty_below_m`` up to this (m).
    stalled_below_m: float = 0.075
    #: How long a part-closed opening must hold still, the tool low, to count as stalled (s).
    stalled_for_s: float = 1.5
    #: Movement of the opening that still counts as holding still (m).
    stall_tolerance_m: float = 0.0015
    #: The tool centre point's height in the base frame under which a held object still
    #: rests on the table (m; table top at z = 0).
    stalled_tool_below_m: float = 0.06
    #: Re-openings of a stalled grasp per task (0: this trigger is off).
    max_stall_retries: int = 1
    #: How far the tool is raised while a stalled grasp is re-opened (m; 0: not at all).
    stall_lift_m: float = 0.05
    #: How fast it is raised (m/s).
    stall_lift_speed_m_s: float = 0.1

    def validate(self) -> None:
        if not 0.0 < self.empty_below_m < self.open_to_m:
            raise ValueError(f"need 0 < empty_below_m ({self.empty_below_m}) < open_to_m "
                             f"({self.open_to_m})")
        if not self.empty_below_m < self.stalled_below_m:
            raise ValueError(f"need empty_below_m ({self.empty_below_m}) < stalled_below_m "
                             f"({self.stalled_below_m})")
        if self.empty_for_s < 0.0 or self.open_for_s <= 0.0 or self.stalled_for_s < 0.0:
            raise ValueError("empty_for_s >= 0, stalled_for_s >= 0 and open_for_s > 0 needed")
        if self.max_retries < 0 or self.max_stall_retries < 0:
            raise ValueError("max_retries and max_stall_retries must be >= 0")
        if self.stall_tolerance_m < 0.0:
            raise ValueError(f"stall_tolerance_m must be >= 0, got {self.stall_tolerance_m}")
        if self.stall_lift_m < 0.0 or self.stall_lift_speed_m_s <= 0.0:
            raise ValueError("stall_lift_m >= 0 and stall_lift_speed_m_s > 0 needed")


class GraspRetry:
    """Applies the rule of the module docstring to one task's chunks, in stamp order.

    ``tool_position``: the arm's joint positions (rad, the measured vector without its
    gripper entry) -> the tool centre point (m) in the base frame; None turns the
    stalled-grasp trigger off. ``chunk_dt_s``: the time between a chunk's rows.
    """

    def __init__(self, config: GraspRetryConfig,
                 tool_position: Callable[[np.ndarray], np.ndarray] | None = None,
                 gripper_column: int = -1, chunk_dt_s: float = 0.1):
        config.validate()
        self.config = config
        self.tool_position = tool_position
        self.gripper_column = gripper_column
        self.chunk_dt_s = chunk_dt_s
        #: Re-openings over every task, both kinds (diagnostics).
        self.retries_total = 0
        #: Of which of a stalled grasp.
        self.stall_retries_total = 0
        self.restart()

    def restart(self) -> None:
        """A new task (instruction or episode): nothing closed, no retries spent."""
        self.retries = 0
        self.stall_retries = 0
        self._empty_since_s: float | None = None
        self._stalled_since_s: float | None = None
        self._stalled_at_m = 0.0
        self._open_until_s: float | None = None
        self._lift: tuple[float, np.ndarray, np.ndarray] | None = None  # (t0, arm, step)

    def apply(self, chunk: np.ndarray, joint_positions, stamp_s: float) -> np.ndarray:
        """The chunk to execute for an observation at ``stamp_s`` whose measured joint
        positions are ``joint_positions`` (arm rad, then the gripper opening m in
        ``gripper_column``): ``chunk`` itself, or a copy with the gripper held open."""
        c = self.config
        if not c.enabled:
            return chunk
        if self._open_until_s is not None and \
                stamp_s >= self._open_until_s - _STAMP_TOLERANCE_S:
            self._open_until_s = self._lift = None
        if self._open_until_s is None and not self._due(joint_positions, stamp_s):
            return chunk
        held = np.array(chunk, copy=True)
        held[:, self.gripper_column] = c.open_to_m
        if self._lift is not None:
            t0, arm, step = self._lift
            rows_s = stamp_s + self.chunk_dt_s * np.arange(held.shape[0])
            progress = np.clip((rows_s - t0 - RELEASE_S) * c.stall_lift_speed_m_s
                               / c.stall_lift_m, 0.0, 1.0)
            arm_columns = np.delete(np.arange(held.shape[1]), self.gripper_column)
            held[:, arm_columns] = arm + progress[:, None] * step
        return held

    def _due(self, joint_positions, stamp_s: float) -> bool:
        """Whether a re-opening starts at this observation (and count it)."""
        c = self.config
        joints = np.asarray(joint_positions, dtype=np.float64)
        opening_m = float(joints[self.gripper_column])
        empty_due = self._empty_due(opening_m, stamp_s)
        stall_due = self._stall_due(joints, opening_m, stamp_s)
        if empty_due and self.retries < c.max_retries:
            self.retries += 1
        elif stall_due and self.stall_retries < c.max_stall_retries:
            self.stall_retries += 1
            self.stall_retries_total += 1
            if c.stall_lift_m > 0.0:
                arm = np.delete(joints, self.gripper_column)
                self._lift = (stamp_s, arm, self._lift_step(arm, c.stall_lift_m))
        else:
            return False
        self.retries_total += 1
        self._empty_since_s = self._stalled_since_s = None
        self._open_until_s = stamp_s + c.open_for_s
        return True

    def _empty_due(self, opening_m: float, stamp_s: float) -> bool:
        if not opening_m < self.config.empty_below_m:
            self._empty_since_s = None
            return False
        if self._empty_since_s is None:
            self._empty_since_s = stamp_s
        return stamp_s - self._empty_since_s + _STAMP_TOLERANCE_S >= self.config.empty_for_s

    def _stall_due(self, joints: np.ndarray, opening_m: float, stamp_s: float) -> bool:
        c = self.config
        part_closed = c.empty_below_m <= opening_m < c.stalled_below_m
        if not part_closed or self.tool_position is None or c.max_stall_retries == 0:
            self._stalled_since_s = None
            return False
        arm = np.delete(joints, self.gripper_column)
        tool_z_m = float(np.asarray(self.tool_position(arm), dtype=np.float64)[2])
        if not tool_z_m < c.stalled_tool_below_m:
            self._stalled_since_s = None
            return False
        if self._stalled_since_s is None or abs(opening_m - self._stalled_at_m) > \
                c.stall_tolerance_m:
            self._stalled_since_s, self._stalled_at_m = stamp_s, opening_m
        return stamp_s - self._stalled_since_s + _STAMP_TOLERANCE_S >= c.stalled_for_s

    def _lift_step(self, arm: np.ndarray, lift_m: float) -> np.ndarray:
        """The least-norm joint step that raises the tool ``lift_m`` (to first order)."""
        z0 = float(self.tool_position(arm)[2])
        eye = np.eye(arm.size) * _JACOBIAN_STEP_RAD
        row = np.array([float(self.tool_position(arm + d)[2]) - z0 for d in eye])
        row /= _JACOBIAN_STEP_RAD
        norm2 = float(row @ row)
        if not np.isfinite(norm2) or norm2 < 1e-12:
            return np.zeros_like(arm)  # no joint raises the tool here: open only
        return row * (lift_m / norm2)
