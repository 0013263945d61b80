"""``EmptyGraspRetry``: re-open a gripper that closed on nothing, so the policy grasps again.

The shipped policy's commonest held-out failure is a gripper that closed past its object
(the object slipped out, or the fingers missed it) to a few millimetres and never opened
again: no demonstration starts from there, so the policy holds still. From an open
gripper next to the object it grasps again (docs/explanation/grasp-rules.md measures how
often that recovers an episode). Re-opening is safe where it applies: an opening below
the narrowest object the robot is asked to grasp means the fingers hold nothing, so
nothing can be dropped.

The rule, on the measured opening at each chunk's observation: closed below
``empty_below_m`` for ``empty_for_s`` -> the chunks' gripper column is set to
``open_to_m`` for ``open_for_s``, then the policy's own gripper commands return; at
most ``max_retries`` times per task (a new instruction or episode starts a new task).
Times are the observations' stamps (sim or robot time). The arm columns are never
changed. ``empty_below_m`` depends on the objects of the task, so it has no default: a
rules file sets it (config/grasp_rules.yaml for the simulated grasp task).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from diffusion_policy_ros.acting.rules import STAMP_TOLERANCE_S, RuleEvent
from diffusion_policy_ros.config import param


@dataclasses.dataclass
class GraspRetryConfig:
    """``policy_node``'s ``grasp_retry.*`` parameters (``PolicyNodeConfig``)."""

    enabled: bool = param(False, "Re-open a gripper that closed on nothing "
                          "(acting/grasp_retry.py): the policy grasps again from there")
    empty_below_m: float = param(
        0.0, "A measured opening below this holds nothing (m; below the narrowest object of "
        "the task); 0 = not set, which the enabled rule refuses", low=0.0, high=0.2)
    empty_for_s: float = param(0.5, "Closed on nothing this long before the gripper is "
                               "re-opened (s)", low=0.0, high=10.0)
    open_for_s: float = param(1.0, "The gripper is held open this long, then the policy's "
                              "commands return (s)", low=0.05, high=10.0)
    open_to_m: float = param(0.085, "The opening commanded while re-opening (m; the "
                             "gripper's stroke)", low=0.001, high=0.2)
    max_retries: int = param(2, "Re-openings per task (instruction); then the policy's "
                             "commands stand", low=0, high=100)

    def validate(self) -> None:
        if self.enabled and self.empty_below_m <= 0.0:
            raise ValueError("grasp_retry.empty_below_m is not set: it depends on the "
                             "task's objects (config/grasp_rules.yaml sets it)")
        if not self.empty_below_m < self.open_to_m:
            raise ValueError(f"need empty_below_m ({self.empty_below_m}) < open_to_m "
                             f"({self.open_to_m})")
        if self.empty_for_s < 0.0 or self.open_for_s <= 0.0 or self.max_retries < 0:
            raise ValueError("empty_for_s >= 0, open_for_s > 0 and max_retries >= 0 needed")


class EmptyGraspRetry:
    """Applies the rule of the module docstring to one task's chunks, in stamp order
    (a ``ChunkRule``)."""

    def __init__(self, config: GraspRetryConfig, gripper_column: int = -1):
        config.validate()
        self.config = config
        self.gripper_column = gripper_column
        #: Re-openings over every task.
        self.retries_total = 0
        self.last_event: RuleEvent | None = None
        self.restart()

    def restart(self) -> None:
        """A new task (instruction or episode): nothing closed, no retries spent."""
        self.retries = 0
        self._empty_since_s: float | None = None
        self._open_until_s: float | None = None

    def holds(self, stamp_s: float) -> bool:
        """Never: while the gripper is held open the arm's columns stay the policy's, and
        the rules after this one see the chunk."""
        return False

    def statistics(self) -> dict[str, int]:
        return {"grasp_retries_total": self.retries_total}

    def apply(self, chunk: np.ndarray, joint_positions: np.ndarray,
              stamp_s: float) -> np.ndarray:
        """The chunk to execute for an observation at ``stamp_s`` with the measured
        ``joint_positions``: ``chunk`` itself, or a copy with the gripper held open."""
        c = self.config
        self.last_event = None
        opening_m = float(joint_positions[self.gripper_column])
        if self._open_until_s is not None and \
                stamp_s >= self._open_until_s - STAMP_TOLERANCE_S:
            self._open_until_s = None
        if self._open_until_s is None:
            if not opening_m < c.empty_below_m:
                self._empty_since_s = None
                return chunk
            if self._empty_since_s is None:
                self._empty_since_s = stamp_s
            waited_s = stamp_s - self._empty_since_s + STAMP_TOLERANCE_S
            if waited_s < c.empty_for_s or self.retries >= c.max_retries:
                return chunk
            self.retries += 1
            self.retries_total += 1
            self._empty_since_s = None
            self._open_until_s = stamp_s + c.open_for_s
            self.last_event = RuleEvent(
                "reopened", stamp_s,
                f"gripper closed on nothing ({opening_m * 1e3:.0f} mm for {waited_s:.1f} s): "
                f"held open at {c.open_to_m * 1e3:.0f} mm for {c.open_for_s:g} s "
                f"(re-opening {self.retries} of {c.max_retries} for this task)")
        held = np.array(chunk, copy=True)
        held[:, self.gripper_column] = c.open_to_m
        return held
