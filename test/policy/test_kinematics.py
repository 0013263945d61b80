"""Forward kinematics in torch (policy/kinematics.py) against MuJoCo's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from diffusion_policy_ros.policy.kinematics import SerialChainKinematics
from diffusion_policy_ros.sim.ik import TcpIk, tool_chain
from diffusion_policy_ros.sim.scene import load_model


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
