"""A tiny policy memorises a tiny synthetic dataset: the training signal is wired right."""

import pytest
import torch

from diffusion_policy_ros.policy import features as keys
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.normalizer import min_max_stats


def _eval_loss(policy: DiffusionPolicy, batch: dict) -> float:
    """The loss at fixed noise and diffusion steps, centre crop (comparable across training)."""
    policy.eval()
    torch.manual_seed(123)
    with torch.no_grad():
        loss = policy.compute_loss(batch).item()
    policy.train()
    return loss


@pytest.mark.parametrize("denoiser", ["unet", pytest.param("dit", marks=pytest.mark.slow)])
def test_tiny_policy_overfits_four_episodes(denoiser, make_config, make_batch):
    torch.manual_seed(0)
    config = make_config(denoiser=denoiser)
    samples = make_batch(config, 4, seed=1)
    t = torch.linspace(0.0, 1.0, config.horizon)[None, :, None]
    episode = torch.arange(4.0)[:, None, None]
    samples[keys.ACTION] = torch.linspace(0.2, 1.0, 7) * torch.sin(2 * t + episode) + 0.05 * episode
    # Each step sees every episode 8 times at different noise levels.
    batch = {k: v.repeat(8, *[1] * (v.dim() - 1)) for k, v in samples.items()}
    policy = DiffusionPolicy(config)
    policy.normalizer.set_stats({key: min_max_stats(samples[key])
                                 for key in (keys.ACTION, keys.STATE, keys.POINTS_XYZ)})
    before = _eval_loss(policy, batch)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=3e-3, weight_decay=0.0)
    for _ in range(200):
        loss = policy.compute_loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = _eval_loss(policy, batch)
    assert before / after > 5.0, (before, after)
