"""The grasp rules as one set: their parameters, the file that turns them on, the chain.

The rules (``grasp_retry``, ``grasp_lift``) are off unless a parameter file turns them
on: they are tuned to a task's objects. config/grasp_rules.yaml does so for the
simulated grasp task; it is a ROS parameter file of ``policy_node`` (``--params-file``
after config/policy_node.yaml) and ``dpr eval --rules`` and ``dpr finetune`` read the
same file, so the node, the evaluation and the RL rollouts act under the same rules.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from diffusion_policy_ros.acting.grasp_lift import ArmKinematics, GraspLiftConfig, StalledGraspLift
from diffusion_policy_ros.acting.grasp_retry import EmptyGraspRetry, GraspRetryConfig
from diffusion_policy_ros.acting.rules import ChunkRule, ChunkRules
from diffusion_policy_ros.config import load_config, section


@dataclasses.dataclass
class GraspRulesConfig:
    """``policy_node``'s ``grasp_retry.*`` and ``grasp_lift.*`` parameters alone."""

    grasp_retry: GraspRetryConfig = section(GraspRetryConfig)
    grasp_lift: GraspLiftConfig = section(GraspLiftConfig)


def load_grasp_rules(path: str | Path) -> GraspRulesConfig:
    """The rules of a ``policy_node`` parameter file that holds nothing else."""
    return load_config(GraspRulesConfig, path, "policy_node")


def grasp_rules(retry: GraspRetryConfig, lift: GraspLiftConfig, action_dt_s: float,
                kinematics: ArmKinematics | None = None) -> ChunkRules:
    """The enabled rules in their order: the retry's chunk is the lift's input, and a lift
    under way holds the chunk (an object lost during it is re-grasped after it).
    ``kinematics`` (the arm's chain) is needed when the lift is enabled."""
    if lift.enabled and kinematics is None:
        raise ValueError("the stalled-grasp lift needs the arm's kinematics")
    rules: list[ChunkRule] = []
    if retry.enabled:
        rules.append(EmptyGraspRetry(retry))
    if lift.enabled:
        assert kinematics is not None  # refused above
        rules.append(StalledGraspLift(lift, kinematics, action_dt_s))
    return ChunkRules(rules)
