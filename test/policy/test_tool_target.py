"""The target-relative-to-tool condition (policy/tool_target.py) inside the policy."""

from __future__ import annotations

import pytest
import torch

from diffusion_policy_ros.policy import features as keys
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.tool_target import ToolTargetEncoder, fourier_features
from diffusion_policy_ros.sim.ik import tool_chain
from diffusion_policy_ros.sim.scene import load_model


def test_fourier_features_layout():
    x = torch.tensor([[0.25, -0.5]])
    f = fourier_features(x, bands=3)
    assert f.shape == (1, 2 * 7)
    torch.testing.assert_close(f[:, :2], x)
    # sin(2^k pi x) for x = 0.25: k = 0 -> sin(pi / 4), k = 1 -> 1, k = 2 -> 0
    torch.testing.assert_close(f[0, 2:5], torch.tensor([2 ** -0.5, 1.0, 0.0]),
                               atol=1e-6, rtol=0)


def test_encoder_starts_at_zero_and_learns():
    encoder = ToolTargetEncoder(2, 8, bands=2, hidden_dim=16)
    centre, tool = torch.rand(4, 2, 3), torch.rand(4, 2, 3)
    assert encoder(centre, tool).abs().max() == 0
    encoder(centre, tool).sum().backward()
    assert encoder.mlp[-1].weight.grad.abs().sum() > 0


def test_policy_with_tool_target_needs_grounding_and_kinematics(make_config, make_batch):
    with pytest.raises(ValueError, match="tool_relative_target"):
        make_config(tool_relative_target=True).validate()
    config = make_config(target_grounding=True, grounding_dim=8, tool_relative_target=True,
                         tool_target_bands=2)
    torch.manual_seed(0)
    policy = DiffusionPolicy(config).eval()
    batch = make_batch(config, 2)
    with pytest.raises(RuntimeError, match="kinematics"):
        policy.encode_observation(batch)
    policy.kinematics.set_chain(tool_chain(load_model()))
    torch.manual_seed(0)
    plain = DiffusionPolicy(make_config(target_grounding=True, grounding_dim=8)).eval()
    plain.load_state_dict(policy.state_dict(), strict=False)
    # Zero-initialised: the same condition as the policy without it, until trained.
    torch.testing.assert_close(policy.encode_observation(batch), plain.encode_observation(batch))
    # The arm's kinematics travel in the state dict (so in checkpoints).
    assert "kinematics.joint_axis" in policy.state_dict()
    policy.train()
    policy.compute_loss({**batch, keys.ACTION: batch[keys.ACTION]}).backward()
    assert policy.tool_target.mlp[-1].weight.grad.abs().sum() > 0
