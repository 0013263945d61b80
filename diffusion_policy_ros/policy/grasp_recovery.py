"""``GraspRecovery``: the two grasp rules ``policy_node`` and ``dpr eval`` put after the policy.

``EmptyGraspRetry`` re-opens a gripper closed on nothing; ``StalledGraspLift`` lifts a
grasp stalled wide (a cube held across its corners). One object applies both in one
order, so the node and the in-process evaluation cannot drift apart: while a lift runs
it owns the chunk (the retry does not see those observations, so an object lost during
the lift is re-grasped after it), otherwise the retry's chunk is the lift rule's input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from diffusion_policy_ros.policy.grasp_lift import GraspLiftConfig, StalledGraspLift
from diffusion_policy_ros.policy.grasp_retry import (
    EmptyGraspRetry,
    GraspEvent,
    GraspRetryConfig,
)

if TYPE_CHECKING:
    from diffusion_policy_ros.policy.kinematics import SerialChainKinematics


class GraspRecovery:
    """``retry`` and ``lift`` (either None when disabled) for one stream of chunks."""

    def __init__(self, retry: GraspRetryConfig, lift: GraspLiftConfig,
                 kinematics: SerialChainKinematics | None, action_dt_s: float,
                 gripper_column: int = -1):
        """``kinematics`` (root -> arm joints -> tool) is needed when ``lift.enabled``."""
        if lift.enabled and kinematics is None:
            raise ValueError("the stalled-grasp lift needs the arm's kinematics")
        self.retry = EmptyGraspRetry(retry, gripper_column) if retry.enabled else None
        self.lift = (StalledGraspLift(lift, kinematics, action_dt_s, gripper_column)
                     if lift.enabled else None)
        self.gripper_column = gripper_column
        #: What the rules did in the last ``apply`` (a re-opening, a lift started or
        #: refused), for the operator's log; empty while the policy's chunks pass.
        self.events: list[GraspEvent] = []

    @property
    def retries_total(self) -> int:
        return self.retry.retries_total if self.retry is not None else 0

    @property
    def lifts_total(self) -> int:
        return self.lift.lifts_total if self.lift is not None else 0

    def restart(self) -> None:
        """A new task (instruction or episode)."""
        for rule in (self.retry, self.lift):
            if rule is not None:
                rule.restart()

    def apply(self, chunk: np.ndarray, joint_positions: np.ndarray,
              stamp_s: float) -> np.ndarray:
        """The chunk to execute for an observation at ``stamp_s`` with the measured
        ``joint_positions`` (the chunk's columns, gripper opening in m)."""
        self.events = []
        if self.lift is not None and self.lift.lifting_at(stamp_s):
            return self.lift.apply(chunk, joint_positions, stamp_s)
        if self.retry is not None:
            chunk = self.retry.apply(chunk, float(joint_positions[self.gripper_column]),
                                     stamp_s)
            self._record(self.retry.last_event)
        if self.lift is not None:
            chunk = self.lift.apply(chunk, joint_positions, stamp_s)
            self._record(self.lift.last_event)
        return chunk

    def _record(self, event: GraspEvent | None) -> None:
        if event is not None:
            self.events.append(event)
