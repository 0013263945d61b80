"""Forward kinematics in torch (policy/kinematics.py), from the MJCF and from the URDF,
against MuJoCo's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from diffusion_policy_ros.description import TOOL_LINK, URDF_PATH
from diffusion_policy_ros.policy.kinematics import (
    SerialChainKinematics,
    urdf_chain,
    urdf_kinematics,
)
from diffusion_policy_ros.sim.ik import TcpIk, tool_chain
from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES, load_model


def test_tool_position_matches_mujoco_over_the_joint_range():
    model = load_model()
    reference = TcpIk(model)
    kinematics = SerialChainKinematics(6)
    kinematics.set_chain(tool_chain(model))
    q = np.random.default_rng(0).uniform(-np.pi, np.pi, (200, 6))
    expected = np.array([reference.forward(row)[0] for row in q])
    got = kinematics(torch.tensor(q)).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # Batch dimensions are kept; extra trailing values (the gripper) are ignored.
    batched = kinematics(torch.tensor(np.c_[q, np.zeros(200)]).reshape(20, 10, 7))
    np.testing.assert_allclose(batched.reshape(200, 3).numpy(), expected, atol=1e-5)


def test_unset_or_mismatched_chain_fails_clearly():
    kinematics = SerialChainKinematics(6)
    with pytest.raises(RuntimeError, match="never set"):
        kinematics(torch.zeros(6))
    chain = tool_chain(load_model())
    with pytest.raises(ValueError, match="lacks"):
        kinematics.set_chain({k: v for k, v in chain.items() if k != "joint_axis"})
    with pytest.raises(ValueError, match="shape"):
        SerialChainKinematics(5).set_chain(chain)


def test_chain_rejects_a_missing_site():
    with pytest.raises(ValueError, match="no site"):
        tool_chain(load_model(), site="no_such_site")


def test_urdf_chain_matches_mujoco_pose_over_the_joint_range():
    """The robot-side kinematics (URDF) give MuJoCo's tcp pose, position and rotation."""
    reference = TcpIk(load_model())
    kinematics = urdf_kinematics(URDF_PATH, ARM_JOINT_NAMES, TOOL_LINK)
    rng = np.random.default_rng(1)
    q = np.concatenate([rng.uniform(*reference.limits_rad.T, (400, 6)),
                        rng.uniform(-np.pi, np.pi, (100, 6))])
    position, rotation = kinematics.pose(torch.tensor(q))
    expected = [reference.forward(row) for row in q]
    np.testing.assert_allclose(position.numpy(), [p for p, _ in expected], atol=1e-9)
    np.testing.assert_allclose(rotation.numpy(), [r for _, r in expected], atol=1e-9)
    np.testing.assert_allclose(kinematics.tool_positions(np.c_[q, np.zeros(len(q))]),
                               position.numpy())
    # The same chain in float32, as a policy would carry it, agrees with the MJCF chain.
    single = SerialChainKinematics(6)
    single.set_chain(urdf_chain(URDF_PATH, ARM_JOINT_NAMES, TOOL_LINK))
    from_mjcf = SerialChainKinematics(6)
    from_mjcf.set_chain(tool_chain(reference.model))
    np.testing.assert_allclose(single(torch.tensor(q)).numpy(),
                               from_mjcf(torch.tensor(q)).numpy(), atol=1e-5)


def test_urdf_chain_rejects_what_a_serial_arm_chain_cannot_hold():
    with pytest.raises(ValueError, match="no link"):
        urdf_chain(URDF_PATH, ARM_JOINT_NAMES, "no_such_link")
    with pytest.raises(ValueError, match="movable joints"):
        urdf_chain(URDF_PATH, ARM_JOINT_NAMES[:5], TOOL_LINK)
    with pytest.raises(ValueError, match="movable joints"):
        urdf_chain(URDF_PATH, list(reversed(ARM_JOINT_NAMES)), TOOL_LINK)
    with pytest.raises(ValueError, match="not a hinge"):
        urdf_chain(URDF_PATH, [*ARM_JOINT_NAMES, "finger_left_joint"], "finger_left_link")


def test_a_vertical_lift_path_rises_with_the_tool_orientation_held():
    arm = urdf_kinematics(URDF_PATH, ARM_JOINT_NAMES, TOOL_LINK)
    grasp_pose = np.array([0.0, -1.2, 2.1, -2.45, -1.57, 1.2])  # the tool 3 cm over the table
    rise = np.linspace(0.0, 0.15, 16)
    path, error = arm.vertical_lift_path(grasp_pose, rise)
    assert path.shape == (16, 6) and error < 1e-3
    p0, r0 = (x.numpy() for x in arm.pose(torch.as_tensor(grasp_pose)))
    positions, rotations = (x.numpy() for x in arm.pose(torch.as_tensor(path)))
    np.testing.assert_allclose(positions[:, 2] - p0[2], rise, atol=1e-3)
    np.testing.assert_allclose(positions[:, :2], np.broadcast_to(p0[:2], (16, 2)), atol=1e-3)
    np.testing.assert_allclose(rotations, np.broadcast_to(r0, (16, 3, 3)), atol=1e-2)
    np.testing.assert_allclose(path[0], grasp_pose, atol=1e-6)  # starts where it is
    # half a metre up from the arm reaching far out is out of reach: a large error says so
    reaching = np.array([0.0, -0.5, 1.0, -2.0, -1.57, 0.0])
    assert arm.vertical_lift_path(reaching, np.linspace(0.0, 0.5, 16))[1] > 0.01
