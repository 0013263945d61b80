"""The PPO update on an accelerator (CUDA or Ascend NPU): the policy under bf16 autocast,
the critic in fp32, both stages. Skipped on a machine without one (CI);
``scripts/accelerator_check.sh`` runs it where there is one.

The batch is what a rollout stores (``rollout_fields``), made by the policy's own
functions on random observations: the update is what is under test, and the simulator
that ``dpr finetune``'s rollouts need may not be installed on an accelerator host.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from diffusion_policy_ros.learning.finetune_config import load_finetune_config
from diffusion_policy_ros.learning.ppo import RolloutBuffer
from diffusion_policy_ros.learning.ppo_policy import (
    DiffusionActorCritic,
    ValueNetwork,
    gaussian_log_prob,
)
from diffusion_policy_ros.learning.ppo_update import PpoLearner, rollout_fields
from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
from diffusion_policy_ros.policy.features import IMAGE, LANGUAGE, POINTS_RGB, POINTS_XYZ, STATE
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy

STEPS, ENVS, STD = 12, 4, 0.04
TINY = dict(image_size=[32, 32], image_crop_size=[28, 28], num_points=64, image_base_channels=8,
            image_stages=2, image_token_grid=2, norm_groups=4, point_feature_dim=32,
            point_tokens=4, fusion_dim=32, fusion_layers=1, fusion_heads=2, cond_dim=32,
            timestep_embed_dim=32, unet_base_dim=16, unet_levels=2, sampler="consistency",
            num_inference_steps=1, prediction_type="sample", chunk_lowpass_terms=3)


def _observations(config: DiffusionPolicyConfig, g: torch.Generator, device) -> dict:
    to, n, (h, w) = config.n_obs_steps, config.num_points, config.image_size
    language = torch.randn(ENVS, config.language_dim, generator=g)
    batch = {IMAGE: torch.randint(0, 256, (ENVS, to, 3, h, w), dtype=torch.uint8, generator=g),
             POINTS_XYZ: torch.rand(ENVS, to, n, 3, generator=g) * 0.5,
             POINTS_RGB: torch.randint(0, 256, (ENVS, to, n, 3), dtype=torch.uint8, generator=g),
             STATE: torch.randn(ENVS, to, config.action_dim, generator=g) * 0.3,
             LANGUAGE: language / language.norm(dim=-1, keepdim=True)}
    return {k: v.to(device) for k, v in batch.items()}


@torch.no_grad()
def _rollout(ac: DiffusionActorCritic, joint: bool, device) -> RolloutBuffer:
    """STEPS control steps of ENVS envs as ``RolloutCollector.collect`` stores them."""
    buffer = RolloutBuffer(rollout_fields(ac, joint), STEPS, ENVS)
    g = torch.Generator().manual_seed(0)
    dg = torch.Generator(device=device).manual_seed(0)
    envs = torch.arange(ENVS)
    for t in range(STEPS):
        batch = _observations(ac.config, g, device)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            cond = ac.policy.encode_observation(batch)
            noises = ac.initial_noise(ENVS, dg, device)
            mean = ac.mean_chunk(cond, noises)
        cond = cond.float()
        coefficients = ac.arm_coefficients(mean)
        action = ac.explore(coefficients, STD, dg)
        elapsed = torch.full((ENVS, 1), 0.1 * t, device=device)
        record = dict(cond=cond, state=batch[STATE], elapsed=elapsed, noises=noises,
                      action=action, ref_mean=mean,
                      logp=gaussian_log_prob(action, coefficients, STD),
                      value=ac.value(cond, ac.state_features(batch[STATE]), elapsed),
                      reward=torch.randn(ENVS, generator=g),
                      done=torch.full((ENVS,), float(t == STEPS - 1)))
        if joint:
            record |= dict(language=batch[LANGUAGE], image=batch[IMAGE],
                           points=batch[POINTS_XYZ], colors=batch[POINTS_RGB])
        buffer.put(t, envs, **{k: v.cpu() for k, v in record.items()})
    return buffer


@pytest.mark.parametrize("joint", [False, True], ids=["encoders_frozen", "joint"])
def test_ppo_update_on_the_accelerator(accelerator, joint):
    torch.manual_seed(0)
    config = DiffusionPolicyConfig(**TINY)
    policy = DiffusionPolicy(config).eval()
    ac = DiffusionActorCritic(policy, ValueNetwork(config.cond_dim, config.state_dim)
                              ).to(accelerator)
    buffer = _rollout(ac, joint, accelerator)
    settings = dataclasses.replace(load_finetune_config(), minibatches=2, target_kl=0.0)
    learner = PpoLearner(ac, settings, accelerator, "bf16", world=1)
    value_losses = []
    for _ in range(5):
        figures = learner.update(buffer, STD, train_policy=True, joint=joint)
        print(f"\n{accelerator} joint={joint}: " + ", ".join(
            f"{k} {v:.4g}" for k, v in sorted(figures.items())))
        assert all(torch.isfinite(torch.tensor(v)) for v in figures.values()), figures
        value_losses.append(figures["value_loss"])
    assert value_losses[-1] < value_losses[0]
    assert all(w.dtype == torch.float32 and w.device.type == accelerator.type
               for w in ac.value.parameters())
    assert all(torch.isfinite(w).all() for w in ac.parameters())
