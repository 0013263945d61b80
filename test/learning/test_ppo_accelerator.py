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
from diffusion_policy_ros.policy.features import IMAGE, LANGUAGE, POINTS_RGB, POINTS_XYZ, STATE
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy

from ..policy.conftest import random_batch, tiny_config

STEPS, ENVS, STD = 12, 4, 0.04


@torch.no_grad()
def _rollout(ac: DiffusionActorCritic, joint: bool, device) -> RolloutBuffer:
    """STEPS control steps of ENVS envs as ``RolloutCollector.collect`` stores them."""
    buffer = RolloutBuffer(rollout_fields(ac, joint), STEPS, ENVS)
    g = torch.Generator().manual_seed(0)
    dg = torch.Generator(device=device).manual_seed(0)
    envs = torch.arange(ENVS)
    for t in range(STEPS):
        batch = {k: v.to(device) for k, v in
                 random_batch(ac.config, ENVS, seed=t, with_action=False).items()}
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
    config = tiny_config(sampler="consistency", num_inference_steps=1, prediction_type="sample",
                         chunk_lowpass_terms=3)
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
