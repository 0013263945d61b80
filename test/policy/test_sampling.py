"""DDPM / DDIM usage: our sampling loop is diffusers' DDIM, and DDIM is what we think it is."""

import math

import pytest
import torch
from diffusers import DDIMScheduler

from diffusion_policy_ros.policy import features as keys
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy


def _policy_and_obs(make_config, make_batch, **changes):
    torch.manual_seed(0)
    config = make_config(**changes)
    policy = DiffusionPolicy(config).eval()
    stats = {keys.ACTION: {"min": -torch.linspace(0.5, 2, 7), "max": torch.linspace(1, 3, 7)},
             keys.STATE: {"min": -torch.ones(7), "max": torch.ones(7)},
             keys.POINTS_XYZ: {"min": torch.tensor([0.15, -0.45, 0.0]),
                            "max": torch.tensor([0.85, 0.45, 0.5])}}
    policy.normalizer.set_stats(stats)
    return policy, make_batch(config, 2, with_action=False)


def _squaredcos_alphas_cumprod(steps: int) -> torch.Tensor:
    """Nichol & Dhariwal's cosine schedule, written out independently of diffusers."""
    def alpha_bar(t: float) -> float:
        return math.cos((t / steps + 0.008) / 1.008 * math.pi / 2) ** 2
    betas = [min(1 - alpha_bar(i + 1) / alpha_bar(i), 0.999) for i in range(steps)]
    return torch.cumprod(1 - torch.tensor(betas, dtype=torch.float64), dim=0)


@pytest.mark.parametrize("denoiser", ["unet", "dit"])
def test_sampling_loop_equals_manual_diffusers_ddim(denoiser, make_config, make_batch):
    policy, obs = _policy_and_obs(make_config, make_batch, denoiser=denoiser)
    ours = policy.predict_action_chunk(obs, 10, torch.Generator().manual_seed(7))

    with torch.no_grad():
        cond = policy.encode_observation(obs)
        scheduler = DDIMScheduler(num_train_timesteps=100, beta_schedule="squaredcos_cap_v2",
                                  clip_sample=True, prediction_type="epsilon")
        scheduler.set_timesteps(10)
        assert scheduler.timesteps.tolist() == list(range(90, -1, -10))
        x = torch.randn((2, 16, 7), generator=torch.Generator().manual_seed(7))
        for t in scheduler.timesteps:
            x = scheduler.step(policy.denoiser(x, t, cond), t, x).prev_sample
        reference = policy.normalizer.unnormalize(keys.ACTION, x)
    assert torch.equal(ours, reference)


def test_ddim_step_follows_the_formula(make_config, make_batch):
    """x_prev = sqrt(a_prev) clip(x0_hat) + sqrt(1 - a_prev) eps, eta = 0, cosine schedule."""
    policy, obs = _policy_and_obs(make_config, make_batch)
    steps = 5
    ours = policy.sample(policy.encode_observation(obs), steps,
                         torch.Generator().manual_seed(3))
    abar = _squaredcos_alphas_cumprod(100)
    with torch.no_grad():
        cond = policy.encode_observation(obs)
        x = torch.randn((2, 16, 7), generator=torch.Generator().manual_seed(3)).double()
        for t in range(80, -1, -20):
            eps = policy.denoiser(x.float(), t, cond).double()
            a, a_prev = abar[t], abar[t - 20] if t >= 20 else torch.tensor(1.0, dtype=torch.float64)
            x0 = ((x - (1 - a).sqrt() * eps) / a.sqrt()).clamp(-1, 1)
            x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
    assert torch.allclose(ours.double(), x, atol=1e-4)
    assert ours.abs().max() <= 1.0 + 1e-6


def test_training_schedule_is_squared_cosine(make_config):
    policy = DiffusionPolicy(make_config())
    ours = policy.training_scheduler.alphas_cumprod.double()
    assert torch.allclose(ours, _squaredcos_alphas_cumprod(100), atol=1e-6)
    assert policy.training_scheduler.config.num_train_timesteps == 100


def test_same_seed_same_chunk_other_seed_other_chunk(make_config, make_batch):
    policy, obs = _policy_and_obs(make_config, make_batch, denoiser="dit")
    a = policy.predict_action_chunk(obs, generator=torch.Generator().manual_seed(1))
    b = policy.predict_action_chunk(obs, generator=torch.Generator().manual_seed(1))
    c = policy.predict_action_chunk(obs, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
