"""Consistency distillation of a trained policy (``dpr distill``).

The student is the teacher (same encoders, fusion, grounding, normaliser, same
language path) whose denoiser is retrained as a consistency function
(``policy/consistency.py``), so it maps a noisy chunk at any time of the grid to
the clean end of the teacher's DDIM trajectory in one call; with
``student_unet_base_dim`` the student's U-Net is narrower and starts from random
weights (fewer multiply-adds per chunk, the CPU's bound). Only the denoiser
changes, and the teacher's encoders are frozen, so the conditions are computed
once for every training sample (``precompute_conditions``) and every step runs
three small denoiser calls on vectors:

1. x_{n+1} = clean demonstration chunk noised to grid time t_{n+1} (n drawn
   uniformly);
2. the teacher solves its probability-flow ODE one DDIM step back to t_n (the
   skip interval ``consistency_skip``): x_n;
3. loss = || f_student(x_{n+1}, t_{n+1}) - f_target(x_n, t_n) ||^2, where the
   target network is an EMA of the student whose rate rises from
   ``target_ema_start`` to ``target_ema_end``. At t_0 f is the identity (boundary
   condition), which anchors the chain to the teacher's clean end.

The checkpoint written is the target network (the slow EMA of the student) with
``sampler: consistency``; the validation figures compare its chunks with the
teacher's DDIM chunks started from the same noise.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from diffusion_policy_ros.learning.dataset import (
    EpisodeDataset,
    dataset_fingerprint,
    episode_dirs,
    episode_instructions,
    load_episodes,
    split_episodes,
)
from diffusion_policy_ros.learning.distill_config import DistillConfig
from diffusion_policy_ros.learning.training_loop import (
    JsonLog,
    LoopConfig,
    TrainingLoop,
    loss_summary,
    open_local_run,
)
from diffusion_policy_ros.policy.checkpoint import load_checkpoint, save_checkpoint
from diffusion_policy_ros.policy.configuration_diffusion import (
    policy_config_from_dict,
    policy_config_to_dict,
)
from diffusion_policy_ros.policy.consistency import ConsistencySchedule
from diffusion_policy_ros.policy.features import ACTION, STATE
from diffusion_policy_ros.policy.language import LanguageEmbedder
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy


@dataclasses.dataclass
class ConditionSet:
    """Teacher conditions of training samples, with what the losses need beside them."""

    cond: torch.Tensor
    """(N, cond_dim) fused observation condition."""
    clean: torch.Tensor
    """(N, T, D) normalised demonstration chunk (what the denoiser models)."""
    state: torch.Tensor
    """(N, To, D) measured joint states (rad, gripper m)."""

    def __len__(self) -> int:
        return self.cond.shape[0]

    def save(self, path: Path) -> None:
        save_file({"cond": self.cond.contiguous(), "clean": self.clean.contiguous(),
                   "state": self.state.contiguous()}, str(path))

    @classmethod
    def load(cls, path: Path) -> ConditionSet:
        tensors = load_file(str(path))
        return cls(tensors["cond"], tensors["clean"], tensors["state"])

    def subset(self, index: torch.Tensor) -> ConditionSet:
        return ConditionSet(self.cond[index], self.clean[index], self.state[index])


@torch.no_grad()
def precompute_conditions(policy: DiffusionPolicy, dataset: EpisodeDataset, batch_size: int,
                          device: torch.device, progress: bool = True) -> ConditionSet:
    """The frozen teacher's condition for every sample of ``dataset`` (eval mode: the RGB
    encoder centre-crops, as at run time)."""
    policy.eval()
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False)
    conds, cleans, states = [], [], []
    for batch in tqdm(loader, desc="teacher conditions", unit="batch", disable=not progress):
        batch = {k: v.to(device) for k, v in batch.items()}
        conds.append(policy.encode_observation(batch).float().cpu())
        cleans.append(policy.normalizer.normalize(
            ACTION, policy.action_offsets(batch, batch[ACTION])).float().cpu())
        states.append(batch[STATE].float().cpu())
    return ConditionSet(torch.cat(conds), torch.cat(cleans), torch.cat(states))


@torch.no_grad()
def teacher_chunks(teacher: DiffusionPolicy, conds: torch.Tensor, seed: int,
                   batch_size: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """(noise, the teacher's DDIM chunk from that noise), one seeded noise per condition,
    normalised units: the anchor of the student's first sampling step."""
    g = torch.Generator(device=conds.device).manual_seed(seed)
    noises, chunks = [], []
    for i in range(0, conds.shape[0], batch_size):
        cond = conds[i:i + batch_size]
        noise = teacher.initial_noise(cond.shape[0], generator=g, device=cond.device)
        noises.append(noise[0])
        chunks.append(teacher.denoise(cond, noise))
    return torch.cat(noises), torch.cat(chunks)


class ConsistencyDistiller:
    """Student, EMA target and frozen teacher denoisers with the consistency loss."""

    def __init__(self, teacher: torch.nn.Module, student: torch.nn.Module,
                 schedule: ConsistencySchedule,
                 teacher_schedule: ConsistencySchedule | None = None):
        """``schedule`` reads the student's outputs, ``teacher_schedule`` (default: the
        same) the teacher's, for a student that predicts another quantity."""
        self.teacher = teacher.eval().requires_grad_(False)
        self.student = student
        self.target = copy.deepcopy(student).eval().requires_grad_(False)
        self.schedule = schedule
        self.teacher_schedule = teacher_schedule or schedule

    def loss(self, cond: torch.Tensor, clean: torch.Tensor,
             generator: torch.Generator | None = None) -> torch.Tensor:
        s = self.schedule
        b = clean.shape[0]
        n = torch.randint(0, len(s.grid) - 1, (b,), generator=generator,
                          device=clean.device)
        t_next, t_now = s.grid.to(clean.device)[n + 1], s.grid.to(clean.device)[n]
        noise = torch.randn(clean.shape, generator=generator, device=clean.device)
        x_next = s.add_noise(clean, noise, t_next)
        with torch.no_grad():
            x_now = self.teacher_schedule.ddim_step(self.teacher(x_next, t_next, cond).float(),
                                                    x_next, t_next, t_now)
            target = s.consistency(self.target(x_now, t_now, cond).float(), x_now, t_now)
        prediction = s.consistency(self.student(x_next, t_next, cond).float(), x_next, t_next)
        return F.mse_loss(prediction, target)

    def anchor_loss(self, cond: torch.Tensor, noise: torch.Tensor,
                    teacher_chunk: torch.Tensor) -> torch.Tensor:
        """MSE between the student's one-step chunk from pure noise at the grid's top (what
        sampling evaluates first) and the teacher's DDIM chunk from the same noise."""
        s = self.schedule
        top = torch.full((noise.shape[0],), int(s.grid[-1]), dtype=torch.long,
                         device=noise.device)
        prediction = s.consistency(self.student(noise, top, cond).float(), noise, top)
        return F.mse_loss(prediction, teacher_chunk)

    @torch.no_grad()
    def update_target(self, rate: float) -> None:
        for p_target, p_student in zip(self.target.parameters(), self.student.parameters(),
                                       strict=True):
            p_target.lerp_(p_student.detach(), 1.0 - rate)


def cached_anchors(teacher: DiffusionPolicy, train_set: ConditionSet, config: DistillConfig,
                   out: Path, fingerprint: str,
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``teacher_chunks`` for the anchor term, cached in ``out`` per data, teacher (weights
    and DDIM steps) and seed; None when ``anchor_weight`` is 0."""
    if config.anchor_weight <= 0:
        return None
    key = cache_key(weights_fingerprint(teacher), teacher.config.num_inference_steps)
    cache = out / f"teacher_chunks_{fingerprint}_{key}_{config.seed}.safetensors"
    if cache.exists():
        tensors = load_file(str(cache))
        anchors = (tensors["noise"], tensors["chunk"])
    else:
        anchors = teacher_chunks(teacher, train_set.cond, config.seed)
        save_file({"noise": anchors[0].contiguous(), "chunk": anchors[1].contiguous()},
                  str(cache))
    return anchors[0].to(device), anchors[1].to(device)


def student_optimizer(distiller: ConsistencyDistiller, config: DistillConfig):
    """AdamW on the student denoiser with a linear warm-up (constant after it)."""
    distiller.student.train()
    optimizer = torch.optim.AdamW(distiller.student.parameters(), lr=config.lr,
                                  weight_decay=config.weight_decay)
    warmup = max(1, config.warmup_steps)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup))


def distillation_step(distiller: ConsistencyDistiller, optimizer, schedule,
                      train_set: ConditionSet,
                      anchors: tuple[torch.Tensor, torch.Tensor] | None,
                      config: DistillConfig, step: int,
                      generator: torch.Generator) -> tuple[float, float]:
    """One optimiser step on a random batch (consistency loss + the anchor term when
    given), then the target network's EMA update at the rate ramped linearly from
    ``target_ema_start`` to ``target_ema_end``; returns (loss, rate)."""
    index = torch.randint(0, len(train_set), (config.batch_size,), generator=generator,
                          device=train_set.cond.device)
    loss = distiller.loss(train_set.cond[index], train_set.clean[index], generator)
    if anchors is not None:
        loss = loss + config.anchor_weight * distiller.anchor_loss(
            train_set.cond[index], anchors[0][index], anchors[1][index])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if config.grad_clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(distiller.student.parameters(), config.grad_clip_norm)
    optimizer.step()
    schedule.step()
    rate = config.target_ema_start + (config.target_ema_end - config.target_ema_start) \
        * step / max(1, config.steps - 1)
    distiller.update_target(rate)
    return loss.item(), rate


@torch.no_grad()
def chunk_agreement(student: DiffusionPolicy, teacher: DiffusionPolicy, conds: ConditionSet,
                    steps: Sequence[int], seed: int = 0) -> dict[str, float]:
    """Mean |student chunk - teacher DDIM chunk| (normalised units) from the same initial
    noise, per student step count; ``teacher_spread`` is the teacher against itself from
    another noise (the scale of one draw's randomness)."""
    g = torch.Generator(device=conds.cond.device).manual_seed(seed)
    cond = conds.cond
    first = teacher.initial_noise(cond.shape[0], generator=g, device=cond.device)
    reference = teacher.denoise(cond, first)
    other = teacher.denoise(cond, teacher.initial_noise(cond.shape[0], generator=g,
                                                        device=cond.device))
    out = {"teacher_spread": float((other - reference).abs().mean())}
    for n in steps:
        noises = student.initial_noise(cond.shape[0], n, g, cond.device)
        noises[0] = first[0]
        chunk = student.denoise(cond, noises, n)
        out[f"student_{n}_step"] = float((chunk - reference).abs().mean())
    return out


def student_config(teacher_config, config: DistillConfig):
    values = policy_config_to_dict(teacher_config)
    values.update(sampler="consistency", consistency_skip=config.consistency_skip,
                  num_inference_steps=config.sampling_steps,
                  prediction_type=config.student_prediction_type,
                  chunk_lowpass_terms=config.chunk_lowpass_terms)
    if config.num_samples:
        values["num_samples"] = config.num_samples
    if config.student_unet_base_dim:
        if teacher_config.denoiser != "unet":
            raise ValueError(f"student_unet_base_dim narrows a U-Net; the teacher's denoiser "
                             f"is a {teacher_config.denoiser} (dpr prune shrinks a DiT)")
        values["unet_base_dim"] = config.student_unet_base_dim
    return policy_config_from_dict(values)


def student_from_teacher(teacher: DiffusionPolicy, config: DistillConfig) -> DiffusionPolicy:
    """The student policy: the teacher's encoders, fusion, grounding and normaliser, and its
    denoiser too unless the student's is narrower (then freshly initialised)."""
    student = DiffusionPolicy(student_config(teacher.config, config))
    weights = teacher.state_dict()
    if student.config.unet_base_dim != teacher.config.unet_base_dim:
        weights = {k: v for k, v in weights.items() if not k.startswith("denoiser.")}
        missing, unexpected = student.load_state_dict(weights, strict=False)
        if unexpected or any(not k.startswith("denoiser.") for k in missing):
            raise ValueError(f"student and teacher differ beyond the denoiser: missing "
                             f"{missing}, unexpected {unexpected}")
    else:
        student.load_state_dict(weights)
    return student


def weights_fingerprint(module: torch.nn.Module, skip_prefix: str | None = None) -> str:
    """Hash of ``module``'s state dict (names, dtypes, shapes, values), entries under
    ``skip_prefix`` left out: what a cache computed from those weights is keyed on."""
    digest = hashlib.sha256()
    for name, value in sorted(module.state_dict().items()):
        if skip_prefix and name.startswith(skip_prefix):
            continue
        value = value.detach().cpu().contiguous()
        digest.update(f"{name}:{value.dtype}:{tuple(value.shape)}".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def cache_key(*parts: object) -> str:
    """Short hash of ``parts`` for a cache file's name."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


def _conditions(teacher: DiffusionPolicy, data_dirs: Sequence[Path], config: DistillConfig,
                out: Path, device: torch.device,
                progress: bool) -> tuple[ConditionSet, ConditionSet, str, str]:
    """Train / validation conditions, cached in ``out`` per data, encoders and split (a
    resumed or repeated run reuses them, and so does another policy with the same
    encoders, e.g. a DiT trained on a U-Net's conditions)."""
    dirs = [e for d in data_dirs for e in episode_dirs(d)]
    fingerprint = dataset_fingerprint(dirs)
    dataset_id = " + ".join(str(Path(d).resolve()) for d in data_dirs)
    key = cache_key(weights_fingerprint(teacher, skip_prefix="denoiser."),
                    config.val_fraction, config.seed)
    cache = {name: out / f"conditions_{name}_{fingerprint}_{key}.safetensors"
             for name in ("train", "val")}
    if all(p.exists() for p in cache.values()):
        return (ConditionSet.load(cache["train"]), ConditionSet.load(cache["val"]), dataset_id,
                fingerprint)
    c = teacher.config
    episodes = load_episodes(dirs, c, progress=progress)
    train_idx, val_idx = split_episodes(len(episodes), config.val_fraction, config.seed)
    embedder = LanguageEmbedder(c.language_model)
    embeddings = {t: embedder.embed(t) for t in sorted(episode_instructions(episodes))}
    sets = {}
    for name, idx in (("train", train_idx), ("val", val_idx)):
        dataset = EpisodeDataset([episodes[i] for i in idx], c, embeddings)
        sets[name] = precompute_conditions(teacher, dataset, config.encode_batch_size, device,
                                           progress)
        sets[name].save(cache[name])
    return sets["train"], sets["val"], dataset_id, fingerprint


def distill(teacher_dir: str | Path, data_dirs: Sequence[str | Path], config: DistillConfig,
            out: str | Path, progress: bool = True) -> Path:
    """Distil the checkpoint in ``teacher_dir`` on the episodes of ``data_dirs``; return the
    student's checkpoint directory (``out/checkpoint``)."""
    out = Path(out)
    device = open_local_run(out, config.device, config.num_threads, config.seed).device
    teacher, teacher_meta = load_checkpoint(teacher_dir)
    if teacher.config.sampler != "ddim":
        raise ValueError(f"{teacher_dir} is already a consistency student; distil from the "
                         "DDIM-trained teacher")
    teacher.to(device).eval()
    train_set, val_set, dataset_id, fingerprint = _conditions(
        teacher, [Path(d) for d in data_dirs], config, out, device, progress)
    train_set = ConditionSet(*(t.to(device) for t in (train_set.cond, train_set.clean,
                                                      train_set.state)))
    val_set = ConditionSet(*(t.to(device) for t in (val_set.cond, val_set.clean,
                                                    val_set.state)))
    val_set = val_set.subset(torch.arange(min(len(val_set), config.val_samples)))
    anchors = cached_anchors(teacher, train_set, config, out, fingerprint, device)

    student = student_from_teacher(teacher, config)
    if config.init_student:
        earlier, earlier_meta = load_checkpoint(config.init_student)
        earlier_teacher = earlier_meta.get("extra", {}).get("distill", {}).get(
            "teacher_weights_sha256")
        if earlier_teacher != teacher_meta.get("weights_sha256"):
            raise ValueError(f"{config.init_student} was not distilled from {teacher_dir}")
        if earlier.config.prediction_type != student.config.prediction_type:
            raise ValueError(f"{config.init_student} predicts {earlier.config.prediction_type}"
                             f", this run's student {student.config.prediction_type}")
        if earlier.config.unet_base_dim != student.config.unet_base_dim:
            raise ValueError(f"{config.init_student} has a U-Net {earlier.config.unet_base_dim} "
                             f"channels wide, this run's student "
                             f"{student.config.unet_base_dim}")
        student.denoiser.load_state_dict(earlier.denoiser.state_dict())
    student.to(device)
    distiller = ConsistencyDistiller(teacher.denoiser, student.denoiser,
                                     student.consistency_schedule.to(device),
                                     teacher.consistency_schedule.to(device))
    optimizer, schedule = student_optimizer(distiller, config)
    generator = torch.Generator(device=device).manual_seed(config.seed)
    log = JsonLog(out / "log.jsonl")

    # The target network, on the teacher's encoders, is what gets evaluated and saved.
    evaluated = DiffusionPolicy(student.config)
    evaluated.load_state_dict(student.state_dict())
    evaluated.to(device).eval()
    evaluated.denoiser = distiller.target

    def validation(step: int) -> dict:
        figures = chunk_agreement(evaluated, teacher, val_set,
                                  sorted({1, 2, 4, config.sampling_steps}), seed=config.seed)
        log.write({"step": step, "val": figures})
        return figures

    def checkpoint(step: int, last: bool) -> None:
        """The target network as a checkpoint at every validation (so a long run can be
        evaluated while it goes on) and at the end."""
        figures = validation(step)
        extra = {"final": last, "distill": {
            "teacher": str(Path(teacher_dir).resolve()),
            "teacher_weights_sha256": teacher_meta.get("weights_sha256"),
            "config": dataclasses.asdict(config), "steps_done": step,
            "train_samples": len(train_set), **loss_summary(losses), "val_before": initial,
            "val_after": figures, "wall_s": loop.elapsed_s}}
        save_checkpoint(evaluated, out / "checkpoint", dataset_id=dataset_id,
                        dataset_hash=fingerprint, extra=extra)

    loop = TrainingLoop(LoopConfig(config.steps, config.val_every, config.max_minutes),
                        checkpoint, progress=progress, desc="distill")
    initial = validation(0)
    losses: list[float] = []

    def distillation(index: int) -> dict | None:
        loss, rate = distillation_step(distiller, optimizer, schedule, train_set, anchors,
                                       config, index, generator)
        losses.append(loss)
        if (index + 1) % config.log_every:
            return None
        record = {"step": index + 1, "loss": float(np.mean(losses[-config.log_every:])),
                  "target_ema": rate, "lr": schedule.get_last_lr()[0],
                  "elapsed_s": loop.elapsed_s}
        log.write(record)
        return {"loss": f"{record['loss']:.4f}"}

    loop.run(distillation)
    return out / "checkpoint"
