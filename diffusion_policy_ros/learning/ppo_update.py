"""The PPO update of ``dpr finetune``: what a rollout stores, the loss, the optimiser step.

Apart from the rollouts (``learning/finetune.py``) so the update imports no simulator: it
runs, and is tested, on a learner that has none (an accelerator host, a DDP rank).
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist
import torch.utils.checkpoint
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from diffusion_policy_ros.learning.finetune_config import FinetuneConfig
from diffusion_policy_ros.learning.optimizer_state import (
    STATE_JSON,
    STATE_TENSORS,
    all_params,
    load_optimizer_state_tensors,
    optimizer_state_tensors,
)
from diffusion_policy_ros.learning.ppo import (
    RolloutBuffer,
    clipped_policy_loss,
    explained_variance,
    gae_advantages,
    normalise_advantages,
)
from diffusion_policy_ros.learning.ppo_policy import DiffusionActorCritic, gaussian_log_prob
from diffusion_policy_ros.policy.devices import autocast_context
from diffusion_policy_ros.policy.features import IMAGE, LANGUAGE, POINTS_RGB, POINTS_XYZ, STATE

if TYPE_CHECKING:  # the rollouts import the simulator; the update does not
    from diffusion_policy_ros.learning.finetune import RolloutCollector


def rollout_fields(ac: DiffusionActorCritic, joint: bool) -> dict[str, tuple[tuple, torch.dtype]]:
    """Name -> (per-sample shape, dtype) of what a rollout step stores for the update; the
    joint stage also keeps the raw observations, to encode them again with gradients."""
    c = ac.config
    to, t, d = c.n_obs_steps, c.horizon, c.action_dim
    fields = {"cond": ((c.cond_dim,), torch.float32), "state": ((to, d), torch.float32),
              "elapsed": ((1,), torch.float32),
              "noises": ((ac.policy.noise_draws(), t, d), torch.float32),
              "action": (ac.action_shape, torch.float32), "ref_mean": ((t, d), torch.float32),
              "logp": ((), torch.float32), "value": ((), torch.float32),
              "reward": ((), torch.float32), "done": ((), torch.float32)}
    if joint:
        h, w = c.image_size
        fields |= {"language": ((c.language_dim,), torch.float32),
                   "image": ((to, 3, h, w), torch.uint8),
                   "points": ((to, c.num_points, 3), torch.float32),
                   "colors": ((to, c.num_points, 3), torch.uint8)}
    return fields


class PpoObjective(nn.Module):
    """One minibatch -> the weighted loss and its parts (a module, so DDP sees the call)."""

    def __init__(self, ac: DiffusionActorCritic):
        super().__init__()
        self.ac = ac

    def forward(self, mb: dict[str, torch.Tensor], std: float, clip: float, kl_weight: float,
                value_weight: float, train_policy: bool, joint: bool, precision: str):
        ac = self.ac
        device = mb["action"].device
        with autocast_context(device, precision):
            if joint:
                batch = {IMAGE: mb["image"], POINTS_XYZ: mb["points"], POINTS_RGB: mb["colors"],
                         STATE: mb["state"], LANGUAGE: mb["language"]}
                cond = torch.utils.checkpoint.checkpoint(
                    ac.policy.encode_observation, batch, use_reentrant=False)
            else:
                cond = mb["cond"]
            mean = ac.mean_chunk(cond, mb["noises"]) if train_policy else None
        value = ac.value(cond, ac.state_features(mb["state"]), mb["elapsed"])
        value_loss = 0.5 * (value - mb["return"]).square().mean()
        parts = {"value_loss": value_loss}
        loss = value_weight * value_loss
        if train_policy:
            assert mean is not None  # made when train_policy
            new_logp = gaussian_log_prob(mb["action"], ac.arm_coefficients(mean), std)
            parts |= clipped_policy_loss(new_logp, mb["logp"], mb["advantage"], clip)
            parts["kl_ref"] = ac.kl_to_reference(mean, mb["ref_mean"], std).mean()
            loss = loss + parts["policy_loss"] + kl_weight * parts["kl_ref"]
        return loss, parts


class PpoLearner:
    """Optimiser, the PPO update and the exact-resume state."""

    def __init__(self, ac: DiffusionActorCritic, config: FinetuneConfig, device: torch.device,
                 precision: str, world: int):
        self.ac, self.config, self.device = ac, config, device
        self.precision, self.world = precision, world
        p = ac.policy
        named = [getattr(p, name, None) for name in (
            "rgb_encoder", "point_encoder", "grounding", "target_proj", "tool_target",
            "proprio_encoder", "fusion")]
        encoders = [m for m in named if m is not None]
        self.encoder_params = [w for m in encoders for w in m.parameters()]
        for w in p.parameters():
            w.requires_grad_(False)
        for w in p.denoiser.parameters():
            w.requires_grad_(True)
        self.optimizer = torch.optim.AdamW([
            {"params": list(p.denoiser.parameters()), "lr": config.lr},
            {"params": self.encoder_params, "lr": config.encoder_lr},
            {"params": list(ac.value.parameters()), "lr": config.value_lr}], weight_decay=0.0)
        objective = PpoObjective(ac)
        self.objective = (DistributedDataParallel(objective, find_unused_parameters=True)
                          if world > 1 else objective)
        self._joint: bool | None = None
        self.generator = torch.Generator().manual_seed(config.seed)

    def set_stage(self, joint: bool) -> None:
        if joint == self._joint:
            return
        for w in self.encoder_params:
            w.requires_grad_(joint)
        if self.world > 1:  # DDP fixes its parameter set at construction
            self.objective = DistributedDataParallel(PpoObjective(self.ac),
                                                     find_unused_parameters=True)
        self._joint = joint

    def _global_mean_std(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        stats = torch.stack([x.sum(), x.square().sum(), torch.tensor(float(x.numel()))]).double()
        if self.world > 1:
            dist.all_reduce(stats)
        mean = stats[0] / stats[2]
        var = (stats[1] / stats[2] - mean ** 2).clamp(min=0.0)
        return mean.float(), var.sqrt().float()

    def _all_mean(self, value: float) -> float:
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t[0]) / self.world

    def update(self, buffer: RolloutBuffer, std: float, train_policy: bool,
               joint: bool) -> dict[str, float]:
        cfg = self.config
        self.set_stage(joint)
        steps = buffer.steps()
        data = buffer.data
        advantages, returns = gae_advantages(
            data["reward"][:steps], data["value"][:steps], data["done"][:steps],
            torch.zeros(buffer.num_envs), cfg.gamma, cfg.gae_lambda)
        names = ["cond", "state", "elapsed", "noises", "action", "ref_mean", "logp", "value"
                 ] + (["language", "image", "points", "colors"] if joint else [])
        flat = buffer.flat(names, {"advantage": advantages, "return": returns})
        mean, spread = self._global_mean_std(flat["advantage"])
        flat["advantage"] = normalise_advantages(flat["advantage"], mean, spread)
        flat = {k: v.to(self.device) for k, v in flat.items()}
        samples = flat["action"].shape[0]
        if samples < cfg.minibatches:
            raise ValueError(f"{samples} samples are fewer than {cfg.minibatches} minibatches")
        sums: dict[str, list[float]] = collections.defaultdict(list)
        epochs_done = 0
        params = all_params(self.optimizer)
        for _ in range(cfg.epochs):
            order = torch.randperm(samples, generator=self.generator)
            kls = []
            for part in torch.tensor_split(order, cfg.minibatches):
                mb = {k: v[part.to(v.device)] for k, v in flat.items()}
                loss, parts = self.objective(mb, std, cfg.clip, cfg.kl_weight, cfg.value_weight,
                                             train_policy, joint, self.precision)
                if not torch.isfinite(loss):
                    raise FloatingPointError(
                        f"PPO loss became {float(loss.detach())} "
                        f"({ {k: float(v.detach()) for k, v in parts.items()} })")
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                sums["grad_norm"].append(float(nn.utils.clip_grad_norm_(params,
                                                                       cfg.grad_clip_norm)))
                self.optimizer.step()
                for k, v in parts.items():
                    sums[k].append(float(v.detach()))
                if "approx_kl" in parts:
                    kls.append(float(parts["approx_kl"]))
            epochs_done += 1
            if (train_policy and cfg.target_kl > 0 and kls
                    and self._all_mean(float(np.mean(kls))) > cfg.target_kl):
                break
        out = {k: float(np.mean(v)) for k, v in sums.items()}
        out["epochs"] = epochs_done
        out["explained_variance"] = explained_variance(flat["value"].cpu(),
                                                       flat["return"].cpu())
        return out

    # -- exact resume -------------------------------------------------------------------

    def save_state(self, out: Path, doc: dict, collector: RolloutCollector) -> None:
        tensors = {f"policy.{k}": v.detach().cpu().contiguous()
                   for k, v in self.ac.policy.state_dict().items()}
        tensors |= {f"value.{k}": v.detach().cpu().contiguous()
                    for k, v in self.ac.value.state_dict().items()}
        tensors |= optimizer_state_tensors(self.optimizer)
        tensors["rng.update"] = self.generator.get_state()
        tensors["rng.rollout"] = collector.generator.get_state().cpu()
        tensors["rng.torch"] = torch.get_rng_state()
        tmp = out / (STATE_TENSORS + ".tmp")
        save_file(tensors, str(tmp))
        os.replace(tmp, out / STATE_TENSORS)
        doc = doc | {"episodes_started": collector.episodes_started.tolist()}
        tmp = out / (STATE_JSON + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2))
        os.replace(tmp, out / STATE_JSON)

    def load_state(self, out: Path, collector: RolloutCollector) -> dict:
        tensors = load_file(str(out / STATE_TENSORS))
        doc = json.loads((out / STATE_JSON).read_text())
        self.ac.policy.load_state_dict({k[7:]: v for k, v in tensors.items()
                                        if k.startswith("policy.")})
        self.ac.value.load_state_dict({k[6:]: v for k, v in tensors.items()
                                       if k.startswith("value.")})
        load_optimizer_state_tensors(self.optimizer, tensors)
        self.generator.set_state(tensors["rng.update"])
        collector.generator.set_state(tensors["rng.rollout"].to(collector.generator.device))
        torch.set_rng_state(tensors["rng.torch"])
        collector.episodes_started[:] = doc["episodes_started"]
        return doc
