"""``dpr train``: the diffusion policy from episode bags (one process or ``torchrun``).

AdamW with a cosine schedule after a linear warm-up, gradient clipping, EMA
weights (what every checkpoint holds; validation uses them too), autocast
where the device supports it with the loss in fp32, a JSONL log, periodic
checkpoints and exact resume. Under ``torchrun`` each process takes a shard
of every epoch and DistributedDataParallel averages the gradients (backend
nccl on CUDA, hccl on Ascend, gloo on the CPU); rank 0 logs and saves.

Resume state is ``training_state.safetensors`` (raw weights, EMA weights,
AdamW moments, RNG state) + ``training_state.json`` (step, schedule): no
pickles anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist
from diffusers.optimization import get_cosine_schedule_with_warmup
from diffusers.training_utils import EMAModel
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from diffusion_policy_ros.learning.augmentation import ColourSwap
from diffusion_policy_ros.learning.dataset import (
    EpisodeDataset,
    dataset_fingerprint,
    episode_dirs,
    episode_instructions,
    load_episodes,
    split_episodes,
)
from diffusion_policy_ros.learning.distributed import init_distributed, training_precision
from diffusion_policy_ros.learning.optimizer_state import (
    STATE_JSON,
    STATE_TENSORS,
    load_optimizer_state_tensors,
    optimizer_state_tensors,
)
from diffusion_policy_ros.learning.train_config import TrainConfig
from diffusion_policy_ros.policy.checkpoint import load_checkpoint, save_checkpoint
from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
from diffusion_policy_ros.policy.devices import autocast_context
from diffusion_policy_ros.policy.language import LanguageEmbedder
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy

CHECKPOINT_DIR = "checkpoint"
LOG = "log.jsonl"


class _Loss(nn.Module):
    """forward(batch) = policy.compute_loss(batch), so DDP's hooks see the call."""

    def __init__(self, policy: DiffusionPolicy):
        super().__init__()
        self.policy = policy

    def forward(self, batch):
        return self.policy.compute_loss(batch)


def _to(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _param_groups(policy, config: TrainConfig) -> list[dict]:
    """One group at ``lr``; the grounding module (if any) in its own at ``grounding_lr_scale``."""
    grounding = getattr(policy, "grounding", None)
    if grounding is None or config.grounding_lr_scale == 1.0:
        return [{"params": list(policy.parameters())}]
    own = {id(p) for p in grounding.parameters()}
    return [{"params": [p for p in policy.parameters() if id(p) not in own]},
            {"params": list(grounding.parameters()), "lr": config.lr * config.grounding_lr_scale}]


def _save_state(out: Path, step: int, policy, ema: EMAModel, optimizer, schedule) -> None:
    tensors = {f"model.{k}": v.detach().cpu().contiguous()
               for k, v in policy.state_dict().items()}
    for i, p in enumerate(ema.shadow_params):
        tensors[f"ema.{i}"] = p.detach().cpu().contiguous()
    tensors |= optimizer_state_tensors(optimizer)
    tensors["rng.torch"] = torch.get_rng_state()
    tmp = out / (STATE_TENSORS + ".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, out / STATE_TENSORS)
    sched = {k: v for k, v in schedule.state_dict().items() if k != "lr_lambdas"}
    doc = {"step": step, "ema_optimization_step": int(ema.optimization_step), "schedule": sched}
    (out / STATE_JSON).write_text(json.dumps(doc, indent=2))


def _load_state(out: Path, policy, ema: EMAModel, optimizer, schedule) -> int:
    tensors = load_file(str(out / STATE_TENSORS))
    doc = json.loads((out / STATE_JSON).read_text())
    policy.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    for i, p in enumerate(ema.shadow_params):
        p.data.copy_(tensors[f"ema.{i}"])
    ema.optimization_step = doc["ema_optimization_step"]
    load_optimizer_state_tensors(optimizer, tensors)
    torch.set_rng_state(tensors["rng.torch"])
    schedule.load_state_dict(doc["schedule"] | {"lr_lambdas": [None] * len(schedule.lr_lambdas)})
    for group, lr in zip(optimizer.param_groups, schedule.get_last_lr(), strict=True):
        group["lr"] = lr
    return int(doc["step"])


@torch.no_grad()
def validation_loss(policy: DiffusionPolicy, dataset, device, precision: str,
                    batch_size: int, seed: int, max_batches: int = 8) -> float:
    """Mean denoising loss on held-out episodes with fixed noise (comparable across steps)."""
    if len(dataset) == 0:
        return float("nan")
    policy.eval()
    generator = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                         generator=generator)
    rng_state = torch.get_rng_state()
    torch.manual_seed(seed)
    losses = []
    for i, batch in enumerate(loader):
        if i >= max_batches:
            break
        with autocast_context(device, precision):
            losses.append(float(policy.compute_loss(_to(batch, device))))
    torch.set_rng_state(rng_state)
    policy.train()
    return float(sum(losses) / len(losses))


def warm_start(policy: DiffusionPolicy, checkpoint_dir: str | Path) -> tuple[int, list[str]]:
    """Copy a checkpoint's weights into ``policy`` where name and shape match.

    Returns (tensors copied, names of the model's tensors left as initialised).
    The checkpoint is verified like any other (``load_checkpoint``); the
    normaliser statistics are not copied: they belong to the new data.
    """
    source, _ = load_checkpoint(checkpoint_dir)
    theirs = {k: v for k, v in source.state_dict().items() if not k.startswith("normalizer.")}
    ours = policy.state_dict()
    copied = {k: v for k, v in theirs.items() if k in ours and ours[k].shape == v.shape}
    policy.load_state_dict(copied, strict=False)
    fresh = sorted(k for k in ours if k not in copied and not k.startswith("normalizer."))
    return len(copied), fresh


def train(data_dir: str | Path | Sequence[str | Path], policy_config: DiffusionPolicyConfig,
          config: TrainConfig, out: str | Path, resume: bool = False,
          progress: bool = True) -> Path:
    """Train on the episodes of one or more directories; return the final checkpoint
    directory (``out/checkpoint``)."""
    data_dirs = [data_dir] if isinstance(data_dir, str | Path) else list(data_dir)
    out = Path(out)
    d, device = init_distributed(config.device)
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    precision = training_precision(config.precision, device)
    fresh = not (out.exists() and any(out.iterdir()))
    if d.world > 1:
        dist.barrier()  # every rank looked before rank 0 writes anything
    if not fresh and not resume:
        raise FileExistsError(f"{out} is not empty; pass --resume to continue that run")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed + d.rank)

    dirs = [e for d in data_dirs for e in episode_dirs(d)]
    episodes = load_episodes(dirs, policy_config, progress=progress and d.main)
    train_idx, val_idx = split_episodes(len(episodes), config.val_fraction, config.seed)
    embedder = LanguageEmbedder(policy_config.language_model,
                                cache_path=out / "language_cache.json" if d.main else None)
    swap = None
    texts = episode_instructions(episodes)
    if config.colour_swap_prob > 0:
        from diffusion_policy_ros.sim.scene import load_model

        swap = ColourSwap.from_model(load_model())
        texts = set().union(*(swap.instruction_variants(t) for t in texts))
    embeddings = {t: embedder.embed(t) for t in sorted(texts)}
    train_set = EpisodeDataset([episodes[i] for i in train_idx], policy_config, embeddings,
                               config.early_frames, config.early_frame_repeat, swap,
                               config.colour_swap_prob)
    val_set = EpisodeDataset([episodes[i] for i in val_idx], policy_config, embeddings)

    policy = DiffusionPolicy(policy_config)
    if config.init_from and not (resume and (out / STATE_JSON).exists()):
        copied, fresh_names = warm_start(policy, config.init_from)
        if d.main:
            print(f"warm start from {config.init_from}: {copied} tensors copied, "
                  f"{len(fresh_names)} new ({', '.join(fresh_names[:6])}"
                  f"{', ...' if len(fresh_names) > 6 else ''})", flush=True)
    policy.normalizer.set_stats(train_set.normalizer_stats())
    if policy.kinematics is not None:
        from diffusion_policy_ros.sim.ik import arm_tool_chain

        policy.kinematics.set_chain(arm_tool_chain())
    policy.to(device).train()
    optimizer = torch.optim.AdamW(_param_groups(policy, config), lr=config.lr,
                                  weight_decay=config.weight_decay)
    schedule = get_cosine_schedule_with_warmup(optimizer, config.warmup_steps, config.steps)
    ema = EMAModel(policy.parameters(), decay=config.ema_decay, use_ema_warmup=True, power=0.75)
    ema.to(device)
    step = 0
    if resume and (out / STATE_JSON).exists():
        step = _load_state(out, policy, ema, optimizer, schedule)
    model = _Loss(policy)
    if d.world > 1:
        model = DistributedDataParallel(model, device_ids=None if device.type == "cpu"
                                        else [device.index])
    sampler = torch.utils.data.DistributedSampler(
        train_set, num_replicas=d.world, rank=d.rank, shuffle=True, seed=config.seed,
        drop_last=True)
    # Its own generator: creating an iterator would otherwise draw from the global RNG,
    # and a resumed run (new iterator mid-epoch) would then diverge from an uninterrupted one.
    loader = torch.utils.data.DataLoader(
        train_set, batch_size=config.batch_size, sampler=sampler, drop_last=True,
        generator=torch.Generator().manual_seed(config.seed + d.rank))
    meta = {"dataset_id": " + ".join(str(Path(d).resolve()) for d in data_dirs),
            "dataset_hash": dataset_fingerprint(dirs)}

    def checkpoint(final: bool) -> Path:
        ema.store(policy.parameters())
        ema.copy_to(policy.parameters())
        path = save_checkpoint(policy, out / CHECKPOINT_DIR, **meta, extra={
            "step": step, "train_episodes": len(train_idx), "val_episodes": len(val_idx),
            "train_config": dataclasses.asdict(config), "final": final})
        ema.restore(policy.parameters())
        _save_state(out, step, policy, ema, optimizer, schedule)
        return path

    log = open(out / LOG, "a", encoding="utf-8") if d.main else None  # noqa: SIM115
    steps_per_epoch = len(loader)
    if steps_per_epoch == 0:
        raise ValueError(f"{len(train_set)} training samples are fewer than one batch of "
                         f"{config.batch_size} per process")
    start, epoch = time.monotonic(), step // steps_per_epoch
    skip = step % steps_per_epoch  # batches of this epoch already trained on before a resume
    bar = tqdm(total=config.steps, initial=step, desc="train", unit="step",
               disable=not (progress and d.main))
    try:
        while step < config.steps:
            sampler.set_epoch(epoch)
            epoch += 1
            for batch in loader:
                if skip:
                    skip -= 1
                    continue
                with autocast_context(device, precision):
                    loss = model(_to(batch, device))
                optimizer.zero_grad(set_to_none=True)
                loss.float().backward()
                grad_norm = float(nn.utils.clip_grad_norm_(policy.parameters(),
                                                           config.grad_clip_norm))
                optimizer.step()
                schedule.step()
                ema.step(policy.parameters())
                step += 1
                bar.update(1)
                loss_value = float(loss.detach())
                if not math.isfinite(loss_value):
                    raise FloatingPointError(f"loss became {loss_value} at step {step}")
                elapsed = time.monotonic() - start
                out_of_time = config.max_minutes > 0 and elapsed > 60 * config.max_minutes
                record = {}
                if step % config.log_every == 0:
                    record = {"step": step, "loss": loss_value, "lr": schedule.get_last_lr()[0],
                              "grad_norm": grad_norm, "elapsed_s": round(elapsed, 1)}
                    bar.set_postfix(loss=f"{loss_value:.4f}")
                if d.main and (step % config.val_every == 0 or step == config.steps):
                    ema.store(policy.parameters())
                    ema.copy_to(policy.parameters())
                    record |= {"step": step, "val_loss": validation_loss(
                        policy, val_set, device, precision, config.batch_size, config.seed)}
                    ema.restore(policy.parameters())
                if d.main and record:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                done = step >= config.steps or out_of_time
                if d.main and (step % config.checkpoint_every == 0 or done):
                    checkpoint(final=step >= config.steps)
                if done:
                    break
            if config.max_minutes > 0 and time.monotonic() - start > 60 * config.max_minutes:
                break
    finally:
        bar.close()
        if log is not None:
            log.close()
        if d.world > 1:
            dist.destroy_process_group()
    return out / CHECKPOINT_DIR
