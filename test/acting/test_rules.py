"""ChunkRules: the grasp task's rules in one order, as every acting loop runs them."""

import numpy as np
import pytest

from diffusion_policy_ros.acting.grasp_lift import GraspLiftConfig
from diffusion_policy_ros.acting.grasp_retry import GraspRetryConfig
from diffusion_policy_ros.acting.grasp_rules import GraspRulesConfig, grasp_rules
from diffusion_policy_ros.description import URDF_PATH
from diffusion_policy_ros.policy.kinematics import urdf_kinematics
from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES

from .conftest import TASK_RULES, lift_config, retry_config

DT_S = 0.1
GRASP_POSE_RAD = np.array([0.0, -1.2, 2.1, -2.45, -1.57, 1.2])  # the tool 3 cm over the table


@pytest.fixture(scope="module")
def arm():
    return urdf_kinematics(URDF_PATH, ARM_JOINT_NAMES, "tcp")


def _step(rules, opening_m: float, stamp_s: float) -> np.ndarray:
    chunk = np.tile(np.append(GRASP_POSE_RAD, 0.0), (16, 1))  # the policy commands closed
    return rules.apply(chunk, np.append(GRASP_POSE_RAD, opening_m), stamp_s)


def test_a_lift_holds_the_chunk_and_a_lost_object_is_regrasped_after_it(arm):
    rules = grasp_rules(retry_config(empty_for_s=0.5, open_for_s=1.0),
                        lift_config(stall_for_s=0.5, lift_for_s=2.0), DT_S, arm)
    stamps = 3.0 + DT_S * np.arange(36)
    # stalled wide at 65 mm for 0.5 s -> lifted; the cube slips out at once (opening 0)
    openings = [0.065] * 6 + [0.0] * 30
    chunks, events = [], []
    for k, (opening, stamp) in enumerate(zip(openings, stamps, strict=True)):
        chunks.append(_step(rules, opening, stamp))
        events += [(k, e.kind) for e in rules.events]
    lifting = [not np.allclose(c[:, :6], GRASP_POSE_RAD) for c in chunks]
    assert lifting.index(True) == 5 and lifting[5:25] == [True] * 20
    gripper = np.array([c[0, -1] for c in chunks])
    assert np.all(gripper[5:25] == 0.0)  # the lift squeezes, the retry does not interfere
    # after the lift the retry sees a gripper closed on nothing for 0.5 s and re-opens it
    assert gripper[30] == TASK_RULES.grasp_retry.open_to_m and not np.any(gripper[25:30])
    assert rules.statistics() == {"grasp_retries_total": 1, "grasp_lifts_total": 1,
                                  "grasp_lifts_unsolved_total": 0}
    assert events == [(5, "lifted"), (30, "reopened")]  # what the node logs, when
    retry, lift = rules.rules
    rules.restart()
    assert lift.lifts == 0 and retry.retries == 0


def test_rules_are_off_by_default_and_then_leave_the_chunk_unchanged():
    off = GraspRulesConfig()
    assert not off.grasp_retry.enabled and not off.grasp_lift.enabled
    rules = grasp_rules(off.grasp_retry, off.grasp_lift, DT_S)  # no kinematics needed
    assert not rules and rules.statistics() == {}
    chunk = np.zeros((16, 7))
    assert rules.apply(chunk, np.zeros(7), 1.0) is chunk and rules.events == []


def test_only_the_enabled_rules_are_built():
    rules = grasp_rules(TASK_RULES.grasp_retry, lift_config(enabled=False), DT_S)
    assert [type(rule).__name__ for rule in rules.rules] == ["EmptyGraspRetry"]


def test_the_lift_needs_the_arms_kinematics():
    with pytest.raises(ValueError, match="kinematics"):
        grasp_rules(GraspRetryConfig(), TASK_RULES.grasp_lift, DT_S)


def test_the_rules_file_turns_both_rules_on_with_the_tasks_thresholds():
    assert TASK_RULES.grasp_retry.enabled and TASK_RULES.grasp_lift.enabled
    # half the narrowest object (40 mm); between flat grasps and cube diagonals (57 mm)
    assert TASK_RULES.grasp_retry.empty_below_m == 0.02
    assert 0.05 < TASK_RULES.grasp_lift.wide_above_m < 0.057
    assert GraspLiftConfig().lift_m == 0.0  # no task's height in the code
