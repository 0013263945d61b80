"""Noise schedules from diffusers: DDPM for training, DDIM for sampling.

Both share ``num_train_timesteps`` (100), the squared-cosine schedule
(``squaredcos_cap_v2``, Nichol & Dhariwal), the prediction type and sample
clipping, so a DDPM-trained denoiser is sampled with DDIM in 10 steps
(timesteps 90, 80, ..., 0 with diffusers' default "leading" spacing) without
retraining. ``eta = 0`` makes DDIM deterministic given the initial noise.
"""

from __future__ import annotations

from diffusers.schedulers.scheduling_ddim import DDIMScheduler
from diffusers.schedulers.scheduling_ddpm import DDPMScheduler

from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig


def _common(config: DiffusionPolicyConfig) -> dict:
    return {"num_train_timesteps": config.num_train_timesteps,
            "beta_schedule": config.beta_schedule, "prediction_type": config.prediction_type,
            "clip_sample": config.clip_sample, "clip_sample_range": config.clip_sample_range}


def make_training_scheduler(config: DiffusionPolicyConfig) -> DDPMScheduler:
    return DDPMScheduler(**_common(config))


def make_sampling_scheduler(config: DiffusionPolicyConfig) -> DDIMScheduler:
    """DDIM whose last step lands on alpha_bar = 1 (``set_alpha_to_one``), i.e. a clean chunk."""
    return DDIMScheduler(**_common(config), set_alpha_to_one=True, steps_offset=0)
