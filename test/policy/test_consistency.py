"""Consistency parameterisation, the teacher's DDIM step and multistep sampling."""

import pytest
import torch
from diffusers.schedulers.scheduling_ddim import DDIMScheduler

from diffusion_policy_ros.policy.consistency import ConsistencySchedule, consistency_sample
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.schedulers import make_sampling_scheduler

from .conftest import tiny_config


@pytest.fixture
def schedule():
    return ConsistencySchedule(tiny_config(sampler="consistency", num_inference_steps=1))


def test_boundary_condition_makes_the_first_grid_time_the_identity(schedule):
    t0 = schedule.grid[:1]
    c_skip, c_out = schedule.boundary_scalings(t0)
    assert float(c_skip) == pytest.approx(1.0) and float(c_out) == 0.0
    x = torch.randn(1, 16, 7)
    assert torch.allclose(schedule.consistency(torch.randn(1, 16, 7), x, t0), x)
    # Away from the boundary the network's estimate takes over.
    c_skip, c_out = schedule.boundary_scalings(schedule.grid[-1:])
    assert float(c_skip) < 0.01 and float(c_out) > 0.99


@pytest.mark.parametrize("prediction_type", ["epsilon", "sample"])
def test_ddim_step_matches_diffusers_on_the_grid(prediction_type):
    config = tiny_config(prediction_type=prediction_type)
    schedule = ConsistencySchedule(config)
    reference: DDIMScheduler = make_sampling_scheduler(config)
    reference.set_timesteps(10)
    g = torch.Generator().manual_seed(0)
    for t in reference.timesteps[:-1]:  # 90 -> 80, ..., 10 -> 0
        x, out = torch.randn(3, 16, 7, generator=g) * 2, torch.randn(3, 16, 7, generator=g) * 2
        expected = reference.step(out, t, x).prev_sample
        tt = torch.full((3,), int(t))
        got = schedule.ddim_step(out, x, tt, tt - 10)
        assert torch.allclose(got, expected, atol=1e-5), int(t)


def test_sampling_timesteps_spread_from_the_top_of_the_grid(schedule):
    assert schedule.sampling_timesteps(1) == [90]
    assert schedule.sampling_timesteps(2) == [90, 40]
    four = schedule.sampling_timesteps(4)
    assert len(four) == 4 and four[0] == 90 and four == sorted(four, reverse=True)
    with pytest.raises(ValueError, match="1..10 steps"):
        schedule.sampling_timesteps(11)


def test_config_refuses_more_consistency_steps_than_the_grid_has():
    with pytest.raises(ValueError, match="consistency sampling takes 1..10 steps"):
        tiny_config(sampler="consistency", num_inference_steps=20).validate()


@pytest.mark.parametrize("steps", [1, 2, 4])
@torch.no_grad()
def test_consistency_chunks_are_finite_in_range_and_reproducible(steps):
    torch.manual_seed(0)
    policy = DiffusionPolicy(tiny_config(sampler="consistency", num_inference_steps=steps))
    cond = torch.randn(5, policy.config.cond_dim)
    noises = policy.initial_noise(5, steps, torch.Generator().manual_seed(1))
    assert noises.shape == (steps, 5, 16, 7)
    chunk = consistency_sample(policy.denoiser, cond, policy.consistency_schedule, noises,
                               policy.consistency_schedule.sampling_timesteps(steps))
    assert chunk.shape == (5, 16, 7) and torch.isfinite(chunk).all()
    assert chunk.abs().max() <= 1.0
    again = policy.denoise(cond, noises, steps)
    assert torch.equal(chunk, again)
