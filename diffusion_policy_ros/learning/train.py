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
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from diffusers.optimization import get_cosine_schedule_with_warmup
from diffusers.training_utils import EMAModel
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from diffusion_policy_ros.learning.augmentation import ColourSwap
from diffusion_policy_ros.learning.dataset import (
    EpisodeDataset,
    arm_chain,
    dataset_fingerprint,
    episode_dirs,
    episode_instructions,
    load_episodes,
    split_episodes,
)
from diffusion_policy_ros.learning.distributed import training_precision
from diffusion_policy_ros.learning.optimizer_state import (
    load_optimizer_state_tensors,
    optimizer_state_tensors,
)
from diffusion_policy_ros.learning.train_config import TrainConfig
from diffusion_policy_ros.learning.training_loop import (
    JsonLog,
    LoopConfig,
    RunSettings,
    TrainingLoop,
    TrainingRun,
    load_resume_state,
    open_run,
    save_resume_state,
)
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
    sched = {k: v for k, v in schedule.state_dict().items() if k != "lr_lambdas"}
    doc = {"step": step, "ema_optimization_step": int(ema.optimization_step), "schedule": sched}
    save_resume_state(out, tensors, doc)


def _load_state(out: Path, policy, ema: EMAModel, optimizer, schedule) -> int:
    tensors, doc = load_resume_state(out)
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


def _batches(loader, sampler, step: int) -> Iterator[dict]:
    """Batches epoch after epoch from where ``step`` steps left off: the batches of this
    epoch trained on before a resume are drawn again and skipped, so a resumed run sees
    the batches an uninterrupted one would."""
    epoch, skip = divmod(step, len(loader))
    while True:
        sampler.set_epoch(epoch)
        epoch += 1
        for batch in loader:
            if skip:
                skip -= 1
                continue
            yield batch


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
    settings = RunSettings(config.device, config.num_threads, config.seed, resume)
    with open_run(out, settings) as run:
        _train(run, data_dirs, policy_config, config, progress)
    return run.out / CHECKPOINT_DIR


def _train(run: TrainingRun, data_dirs: list[str | Path], policy_config: DiffusionPolicyConfig,
           config: TrainConfig, progress: bool) -> None:
    d, device, out = run.rank, run.device, run.out
    precision = training_precision(config.precision, device)
    dirs = [e for d in data_dirs for e in episode_dirs(d)]
    episodes = load_episodes(dirs, policy_config, progress=progress and d.main)
    train_idx, val_idx = split_episodes(len(episodes), config.val_fraction, config.seed)
    embedder = LanguageEmbedder(policy_config.language_model,
                                cache_path=out / "language_cache.json" if d.main else None)
    swap = None
    texts = episode_instructions(episodes)
    if config.colour_swap_prob > 0:
        swap = ColourSwap.from_objects()
        texts = set().union(*(swap.instruction_variants(t) for t in texts))
    embeddings = {t: embedder.embed(t) for t in sorted(texts)}
    train_set = EpisodeDataset([episodes[i] for i in train_idx], policy_config, embeddings,
                               config.early_frames, config.early_frame_repeat, swap,
                               config.colour_swap_prob)
    val_set = EpisodeDataset([episodes[i] for i in val_idx], policy_config, embeddings)

    policy = DiffusionPolicy(policy_config)
    if config.init_from and not run.resuming:
        copied, fresh_names = warm_start(policy, config.init_from)
        if d.main:
            print(f"warm start from {config.init_from}: {copied} tensors copied, "
                  f"{len(fresh_names)} new ({', '.join(fresh_names[:6])}"
                  f"{', ...' if len(fresh_names) > 6 else ''})", flush=True)
    policy.normalizer.set_stats(train_set.normalizer_stats())
    if policy.kinematics is not None:
        policy.kinematics.set_chain(arm_chain())
    policy.to(device).train()
    optimizer = torch.optim.AdamW(_param_groups(policy, config), lr=config.lr,
                                  weight_decay=config.weight_decay)
    schedule = get_cosine_schedule_with_warmup(optimizer, config.warmup_steps, config.steps)
    ema = EMAModel(policy.parameters(), decay=config.ema_decay, use_ema_warmup=True, power=0.75)
    ema.to(device)
    step = _load_state(out, policy, ema, optimizer, schedule) if run.resuming else 0
    model: torch.nn.Module = _Loss(policy)
    if d.world > 1:
        model = DistributedDataParallel(model, device_ids=None if device.type == "cpu"
                                        else [device.index])
    sampler: torch.utils.data.DistributedSampler = torch.utils.data.DistributedSampler(
        train_set, num_replicas=d.world, rank=d.rank, shuffle=True, seed=config.seed,
        drop_last=True)
    # Its own generator: creating an iterator would otherwise draw from the global RNG,
    # and a resumed run (new iterator mid-epoch) would then diverge from an uninterrupted one.
    loader = torch.utils.data.DataLoader(
        train_set, batch_size=config.batch_size, sampler=sampler, drop_last=True,
        generator=torch.Generator().manual_seed(config.seed + d.rank))
    if len(loader) == 0:
        raise ValueError(f"{len(train_set)} training samples are fewer than one batch of "
                         f"{config.batch_size} per process")
    batches = _batches(loader, sampler, step)
    meta = {"dataset_id": " + ".join(str(Path(d).resolve()) for d in data_dirs),
            "dataset_hash": dataset_fingerprint(dirs)}
    log = JsonLog(out / LOG if d.main else None)

    def with_ema_weights(fn):
        ema.store(policy.parameters())
        ema.copy_to(policy.parameters())
        try:
            return fn()
        finally:
            ema.restore(policy.parameters())

    def training_step(index: int) -> dict | None:
        with autocast_context(device, precision):
            loss = model(_to(next(batches), device))
        optimizer.zero_grad(set_to_none=True)
        loss.float().backward()
        grad_norm = float(nn.utils.clip_grad_norm_(policy.parameters(), config.grad_clip_norm))
        optimizer.step()
        schedule.step()
        ema.step(policy.parameters())
        step = index + 1
        loss_value = float(loss.detach())
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"loss became {loss_value} at step {step}")
        record, postfix = {}, None
        if step % config.log_every == 0:
            record = {"step": step, "loss": loss_value, "lr": schedule.get_last_lr()[0],
                      "grad_norm": grad_norm, "elapsed_s": round(loop.elapsed_s, 1)}
            postfix = {"loss": f"{loss_value:.4f}"}
        if d.main and (step % config.val_every == 0 or step == config.steps):
            record |= {"step": step, "val_loss": with_ema_weights(lambda: validation_loss(
                policy, val_set, device, precision, config.batch_size, config.seed))}
        if record:
            log.write(record)
        return postfix

    def checkpoint(step: int, last: bool) -> None:
        """The EMA weights as the policy checkpoint, then the exact resume state."""
        with_ema_weights(lambda: save_checkpoint(
            policy, out / CHECKPOINT_DIR, **meta, extra={
                "step": step, "train_episodes": len(train_idx), "val_episodes": len(val_idx),
                "train_config": dataclasses.asdict(config), "final": step >= config.steps}))
        _save_state(out, step, policy, ema, optimizer, schedule)

    loop = TrainingLoop(LoopConfig(config.steps, config.checkpoint_every, config.max_minutes),
                        checkpoint if d.main else None, start_step=step,
                        progress=progress and d.main, desc="train")
    loop.run(training_step)
