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
