"""``StalledGraspLift``: lift an object whose grasp stalled wide, which the policy never lifts.

The shipped policy lifts when the gripper's opening matches a flat grasp of the object.
When the fingers meet a cube across two of its corners, the opening stops at the cube's
diagonal (56-70 mm, above every flat grasp here) and the policy waits there, commanding
the gripper closed, until the episode ends: the commonest failure after an instruction
switch (docs/explanation/grasp-rules.md). The cube is held, squeezed between the
fingers, and a lift carries it. Re-opening it instead was tried twice and lost more
episodes than it mended: a re-opened grasp is a new draw that can land on the corners
again.

The rule, at each chunk's observation (stamps in s, openings in m): the policy commands
the gripper narrower than ``wide_above_m`` (the chunk's first ``commanded_points``) while
the measured opening stays between ``wide_above_m`` and ``open_below_m``, closing by less
than ``closing_below_m_s``, with the tool centre point below ``tool_below_m`` in the base
frame (what the fingers hold still rests on the table), for ``stall_for_s`` -> for
``lift_for_s`` the arm follows a vertical lift of ``lift_m`` over ``lift_ramp_s`` from
the measured joints, the tool's orientation held (damped least squares on the arm's
forward kinematics, ``SerialChainKinematics.vertical_lift_path``), and the gripper is
commanded to ``squeeze_to_m``; then the policy's commands return. At most ``max_lifts``
per task. The lift's joint targets pass the tracker's limits like every chunk.
``wide_above_m``, ``tool_below_m`` and ``lift_m`` depend on the task's objects and on
what the task counts as lifted, so they have no defaults: a rules file sets them
(config/grasp_rules.yaml for the simulated grasp task).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

from diffusion_policy_ros.acting.rules import STAMP_TOLERANCE_S, RuleEvent
from diffusion_policy_ros.config import param


class ArmKinematics(Protocol):
    """The arm's chain (root -> arm joints -> tool), e.g. ``policy.kinematics.urdf_kinematics``:
    the rule itself needs no torch, the chain solves the path."""

    n_joints: int

    def tool_positions(self, q_rad: np.ndarray) -> np.ndarray:
        """(..., 3) tool centre points in the root frame (m)."""

    def vertical_lift_path(self, q0_rad: np.ndarray,
                           rise_m: np.ndarray) -> tuple[np.ndarray, float]:
        """(len(rise_m), n_joints) joints raising the tool by ``rise_m``, orientation held,
        and the path's largest pose error (m)."""

@dataclasses.dataclass
class GraspLiftConfig:
    """``policy_node``'s ``grasp_lift.*`` parameters (``PolicyNodeConfig``)."""

    enabled: bool = param(
        False, "Lift a grasp that stalled wide, e.g. a cube held across its corners, which the "
        "policy never lifts (acting/grasp_lift.py); needs the arm's kinematics (urdf_file, "
        "tool_link)")
    wide_above_m: float = param(
        0.0, "Commanded opening below this and measured above it: stalled wide (m; above "
        "every flat grasp of the task's objects, below their narrowest diagonal); 0 = not "
        "set, which the enabled rule refuses", low=0.0, high=0.2)
    open_below_m: float = param(0.08, "A measured opening above this is an open gripper, "
                                "not a stalled grasp (m)", low=0.001, high=0.2)
    closing_below_m_s: float = param(0.02, "Closing slower than this counts as stalled (m/s; "
                                     "a free close runs at 0.1 m/s)", low=0.0, high=1.0)
    stall_for_s: float = param(0.5, "Stalled wide this long before the lift (s)", low=0.0,
                               high=10.0)
    tool_below_m: float = param(
        0.0, "Only with the tool centre point below this height over the base (m; table top "
        "0): what the fingers hold still rests on the table, so above the table by the "
        "task's grasp heights; 0 = not set, which the enabled rule refuses",
        low=-1.0, high=2.0)
    commanded_points: int = param(4, "Chunk points whose gripper command counts as "
                                  "commanded closed", low=1, high=64)
    lift_m: float = param(0.0, "Height the tool rises, orientation held (m); 0 = not set, "
                          "which the enabled rule refuses", low=0.0, high=0.5)
    lift_ramp_s: float = param(1.5, "Time over which it rises (s)", low=0.1, high=10.0)
    lift_for_s: float = param(2.5, "How long the lift replaces the policy's chunks (s)",
                              low=0.1, high=30.0)
    squeeze_to_m: float = param(0.0, "Gripper opening commanded during the lift (m; 0 = keep "
                                "squeezing)", low=0.0, high=0.2)
    max_lifts: int = param(1, "Lifts per task (instruction)", low=0, high=100)

    def validate(self) -> None:
        unset = [name for name in ("wide_above_m", "tool_below_m", "lift_m")
                 if getattr(self, name) == 0.0]
        if self.enabled and unset:
            raise ValueError(f"grasp_lift.{', grasp_lift.'.join(unset)} not set: they depend "
                             "on the task's objects (config/grasp_rules.yaml sets them)")
        if not self.wide_above_m < self.open_below_m:
            raise ValueError(f"need wide_above_m ({self.wide_above_m}) < open_below_m "
                             f"({self.open_below_m})")
        if self.stall_for_s < 0.0 or self.lift_ramp_s <= 0.0 or self.lift_for_s <= 0.0:
            raise ValueError("stall_for_s >= 0, lift_ramp_s > 0 and lift_for_s > 0 needed")
        if self.closing_below_m_s < 0.0 or self.commanded_points < 1 or self.max_lifts < 0:
            raise ValueError("closing_below_m_s >= 0, commanded_points >= 1 and "
                             "max_lifts >= 0 needed")
        if not 0.0 <= self.lift_m <= 0.5 or self.squeeze_to_m < 0.0:
            raise ValueError(f"need 0 <= lift_m ({self.lift_m}) <= 0.5 and squeeze_to_m >= 0")


def lift_rise_m(config: GraspLiftConfig, action_dt_s: float) -> np.ndarray:
    """The tool's rise (m) at each action step of a lift: ``lift_m`` over ``lift_ramp_s``."""
    steps = int(np.ceil(config.lift_ramp_s / action_dt_s - STAMP_TOLERANCE_S))
    return config.lift_m * np.minimum(np.arange(steps + 1) * action_dt_s / config.lift_ramp_s,
                                      1.0)


class StalledGraspLift:
    """Applies the rule of the module docstring to one task's chunks, in stamp order
    (a ``ChunkRule``).

    The arm joints are the chunk's first ``kinematics.n_joints`` columns, the gripper its
    ``gripper_column``."""

    #: The largest pose error of a lift path that is still followed (m, see
    #: ``SerialChainKinematics.vertical_lift_path``); a worse solution (a singular or
    #: out-of-reach arm) is dropped.
    MAX_PATH_ERROR = 0.005

    def __init__(self, config: GraspLiftConfig, kinematics: ArmKinematics,
                 action_dt_s: float, gripper_column: int = -1):
        config.validate()
        if action_dt_s <= 0.0:
            raise ValueError(f"action_dt_s must be > 0, got {action_dt_s}")
        self.config = config
        self.kinematics = kinematics
        self.action_dt_s = action_dt_s
        self.gripper_column = gripper_column
        #: Lifts started over every task, and lifts whose path was not solved.
        self.lifts_total = 0
        self.unsolved_total = 0
        #: What the last ``apply`` did beyond passing the chunk on or continuing a lift.
        self.last_event: RuleEvent | None = None
        self.restart()

    def restart(self) -> None:
        """A new task (instruction or episode): nothing stalled, no lift spent."""
        self.lifts = 0
        self._stalled_since_s: float | None = None
        self._stalled_opening_m = 0.0
        self._path: np.ndarray | None = None
        self._path_start_s = 0.0

    def statistics(self) -> dict[str, int]:
        return {"grasp_lifts_total": self.lifts_total,
                "grasp_lifts_unsolved_total": self.unsolved_total}

    def holds(self, stamp_s: float) -> bool:
        """Whether a lift owns the chunk for an observation at ``stamp_s`` (a lift whose
        ``lift_for_s`` has passed ends here)."""
        if self._path is not None and \
                stamp_s - self._path_start_s >= self.config.lift_for_s - STAMP_TOLERANCE_S:
            self._path = None
        return self._path is not None

    def apply(self, chunk: np.ndarray, joint_positions: np.ndarray,
              stamp_s: float) -> np.ndarray:
        """The chunk to execute for an observation at ``stamp_s`` with the measured
        ``joint_positions`` (the chunk's columns): ``chunk`` itself, or a lift."""
        c = self.config
        self.last_event = None
        if self.holds(stamp_s):
            return self._lift_chunk(chunk, stamp_s)
        if self.lifts >= c.max_lifts or not self._stalled_wide(chunk, joint_positions, stamp_s):
            return chunk
        assert self._stalled_since_s is not None  # _stalled_wide keeps it while True
        waited_s = stamp_s - self._stalled_since_s + STAMP_TOLERANCE_S
        if waited_s < c.stall_for_s:
            return chunk
        self._stalled_since_s = None
        self.lifts += 1
        rise = lift_rise_m(c, self.action_dt_s)
        path, error = self.kinematics.vertical_lift_path(np.asarray(joint_positions), rise)
        stalled = (f"grasp stalled wide ({joint_positions[self.gripper_column] * 1e3:.0f} mm "
                   f"for {waited_s:.1f} s, the policy commanding it closed)")
        if not (np.isfinite(path).all() and error <= self.MAX_PATH_ERROR):
            self.unsolved_total += 1
            self.last_event = RuleEvent(
                "lift_unsolved", stamp_s,
                f"{stalled}, but no vertical lift path within {self.MAX_PATH_ERROR * 1e3:g} mm "
                f"(pose error {error * 1e3:.1f} mm): not lifted, the policy's chunks stand")
            return chunk
        self.lifts_total += 1
        self._path, self._path_start_s = path, stamp_s
        self.last_event = RuleEvent(
            "lifted", stamp_s,
            f"{stalled}: lifting the tool {c.lift_m:g} m over {c.lift_ramp_s:g} s, gripper "
            f"commanded to {c.squeeze_to_m * 1e3:.0f} mm, for {c.lift_for_s:g} s")
        return self._lift_chunk(chunk, stamp_s)

    def _stalled_wide(self, chunk: np.ndarray, joint_positions: np.ndarray,
                      stamp_s: float) -> bool:
        """Whether the grasp is stalled wide now; tracks since when."""
        c = self.config
        opening = float(joint_positions[self.gripper_column])
        commanded = float(np.min(chunk[:c.commanded_points, self.gripper_column]))
        wide = commanded < c.wide_above_m < opening < c.open_below_m
        if wide:
            n = self.kinematics.n_joints
            tool = self.kinematics.tool_positions(np.asarray(joint_positions[:n],
                                                             dtype=np.float64))
            wide = float(tool[2]) < c.tool_below_m
        if not wide:
            self._stalled_since_s = None
            return False
        if self._stalled_since_s is not None:
            closed_m = self._stalled_opening_m - opening
            allowed_m = c.closing_below_m_s * (stamp_s - self._stalled_since_s) + 1e-3
            if closed_m <= allowed_m:
                return True
        self._stalled_since_s, self._stalled_opening_m = stamp_s, opening
        return True

    def _lift_chunk(self, chunk: np.ndarray, stamp_s: float) -> np.ndarray:
        """The lift path from ``stamp_s`` on, one point per ``action_dt_s``, held at its top."""
        path = self._path
        assert path is not None  # called while a lift holds the chunks
        offset = int(round((stamp_s - self._path_start_s) / self.action_dt_s))
        index = np.minimum(offset + np.arange(len(chunk)), len(path) - 1)
        lifted = np.array(chunk, dtype=np.float64, copy=True)
        lifted[:, :self.kinematics.n_joints] = path[index]
        lifted[:, self.gripper_column] = self.config.squeeze_to_m
        return lifted
