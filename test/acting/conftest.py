"""The grasp task's rules as config/grasp_rules.yaml ships them, for the rule tests."""

from __future__ import annotations

import dataclasses

from diffusion_policy_ros.acting.grasp_lift import GraspLiftConfig
from diffusion_policy_ros.acting.grasp_retry import GraspRetryConfig
from diffusion_policy_ros.acting.grasp_rules import load_grasp_rules
from diffusion_policy_ros.config import CONFIG_DIR

TASK_RULES = load_grasp_rules(CONFIG_DIR / "grasp_rules.yaml")


def retry_config(**changes) -> GraspRetryConfig:
    """The simulated grasp task's retry, with ``changes``."""
    return dataclasses.replace(TASK_RULES.grasp_retry, **changes)


def lift_config(**changes) -> GraspLiftConfig:
    """The simulated grasp task's lift, with ``changes``."""
    return dataclasses.replace(TASK_RULES.grasp_lift, **changes)
