"""GraspRecovery: the grasp retry and the stalled-grasp lift in one order, as the node runs them."""

import numpy as np
import pytest

from diffusion_policy_ros.description import URDF_PATH
from diffusion_policy_ros.policy.grasp_lift import GraspLiftConfig
from diffusion_policy_ros.policy.grasp_recovery import GraspRecovery
from diffusion_policy_ros.policy.grasp_retry import GraspRetryConfig
from diffusion_policy_ros.policy.kinematics import urdf_kinematics
from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES

DT_S = 0.1
GRASP_POSE_RAD = np.array([0.0, -1.2, 2.1, -2.45, -1.57, 1.2])  # the tool 3 cm over the table


@pytest.fixture(scope="module")
def arm():
    return urdf_kinematics(URDF_PATH, ARM_JOINT_NAMES, "tcp")


def _step(recovery: GraspRecovery, opening_m: float, stamp_s: float) -> np.ndarray:
    chunk = np.tile(np.append(GRASP_POSE_RAD, 0.0), (16, 1))  # the policy commands closed
    return recovery.apply(chunk, np.append(GRASP_POSE_RAD, opening_m), stamp_s)


def test_a_lift_owns_the_chunk_and_a_lost_object_is_regrasped_after_it(arm):
    recovery = GraspRecovery(GraspRetryConfig(empty_for_s=0.5, open_for_s=1.0),
                             GraspLiftConfig(stall_for_s=0.5, lift_for_s=2.0), arm, DT_S)
    stamps = 3.0 + DT_S * np.arange(36)
    # stalled wide at 65 mm for 0.5 s -> lifted; the cube slips out at once (opening 0)
    openings = [0.065] * 6 + [0.0] * 30
    chunks, events = [], []
    for k, (opening, stamp) in enumerate(zip(openings, stamps, strict=True)):
        chunks.append(_step(recovery, opening, stamp))
        events += [(k, e.kind) for e in recovery.events]
    lifting = [not np.allclose(c[:, :6], GRASP_POSE_RAD) for c in chunks]
    assert lifting.index(True) == 5 and lifting[5:25] == [True] * 20
    gripper = np.array([c[0, -1] for c in chunks])
    assert np.all(gripper[5:25] == 0.0)  # the lift squeezes, the retry does not interfere
    # after the lift the retry sees a gripper closed on nothing for 0.5 s and re-opens it
    assert gripper[30] == recovery.retry.config.open_to_m and not np.any(gripper[25:30])
    assert (recovery.lifts_total, recovery.retries_total) == (1, 1)
    assert events == [(5, "lifted"), (30, "reopened")]  # what the node logs, when
    recovery.restart()
    assert recovery.lift.lifts == 0 and recovery.retry.retries == 0


def test_disabled_rules_leave_the_chunk_and_need_no_kinematics():
    recovery = GraspRecovery(GraspRetryConfig(enabled=False), GraspLiftConfig(enabled=False),
                             None, DT_S)
    chunk = np.zeros((16, 7))
    assert recovery.apply(chunk, np.zeros(7), 1.0) is chunk
    assert (recovery.retries_total, recovery.lifts_total) == (0, 0)


def test_the_lift_needs_the_arms_kinematics():
    with pytest.raises(ValueError, match="kinematics"):
        GraspRecovery(GraspRetryConfig(), GraspLiftConfig(), None, DT_S)
