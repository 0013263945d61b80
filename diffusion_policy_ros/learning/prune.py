"""Learnable layer pruning of the DiT denoiser (``dpr prune``), LightDP's first half.

Only the denoiser changes in every stage: the encoders, fusion, grounding and
normaliser come from one checkpoint and stay frozen, so each stage trains on
precomputed conditions (``learning.distill.ConditionSet``; the cache of a ``dpr
distill`` run of the same data can be reused) and a step costs a few denoiser calls.

Stages (``--stage``):

- ``teacher``: a full DiT denoiser (fields from ``dit_config``) trained with the DDPM
  loss on the conditions of a source checkpoint (the shipped U-Net), keeping that
  checkpoint's encoders: the "full transformer teacher". A separate stage rather than
  a ``dpr train`` run because it needs no images at all once the conditions exist.
- ``prune``: the teacher's blocks gated by N:M Gumbel-softmax masks
  (``policy/pruning.py``), gates and weights trained together on the DDPM loss
  (optionally matched to the full teacher's output), the highest gates kept, then the
  pruned model fine-tuned without masks. ``selection`` swaps the learnt gates for a
  baseline: the SVD-importance initialisation alone, or the mask whose immediate loss
  (full teacher, no retraining) is lowest.
- ``distill``: consistency distillation (``learning.distill.ConsistencyDistiller``)
  of a pruned student from the full DiT teacher, as LightDP combines the two.

Every stage writes ``OUT/checkpoint`` (loadable by ``PolicyRunner`` and ``dpr eval``)
and ``OUT/log.jsonl``; validation figures are computed on held-out conditions with
fixed noise, so runs compare directly.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from diffusers.training_utils import EMAModel

from diffusion_policy_ros.learning import distill as distill_module
from diffusion_policy_ros.learning.distill import (
    ConditionSet,
    ConsistencyDistiller,
    cached_anchors,
    chunk_agreement,
    distillation_step,
    student_config,
    student_optimizer,
)
from diffusion_policy_ros.learning.distill_config import DistillConfig
from diffusion_policy_ros.learning.prune_config import PruneConfig
from diffusion_policy_ros.learning.training_loop import (
    JsonLog,
    LoopConfig,
    TrainingLoop,
    loss_summary,
    open_local_run,
)
from diffusion_policy_ros.policy.checkpoint import load_checkpoint, save_checkpoint
from diffusion_policy_ros.policy.configuration_diffusion import (
    load_policy_config,
    policy_config_from_dict,
    policy_config_to_dict,
)
from diffusion_policy_ros.policy.dit import DiffusionTransformer
from diffusion_policy_ros.policy.features import ACTION
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.pruning import (
    GatedDiT,
    NMPattern,
    candidate_masks,
    importance_distribution,
    prune_policy,
)

DENOISER_FIELDS = ("denoiser", "dit_width", "dit_layers", "dit_heads", "dit_mlp_ratio",
                   "timestep_embed_dim")
"""Config fields that shape only the denoiser: the teacher stage takes them from dit_config."""
VAL_BATCH = 512
MAX_MASKS = 1024
"""Most N:M masks whose immediate loss ``mask_losses`` tries (all of them for 8 blocks)."""


# ---------------------------------------------------------------------------- losses, figures


def denoising_loss(denoiser: torch.nn.Module, policy: DiffusionPolicy, cond: torch.Tensor,
                   clean: torch.Tensor, generator: torch.Generator | None = None,
                   teacher: torch.nn.Module | None = None,
                   teacher_weight: float = 0.0) -> torch.Tensor:
    """``DiffusionPolicy.compute_loss``'s denoising term on precomputed conditions, mixed
    with ``teacher_weight`` of output matching against ``teacher`` at the same input."""
    noise = torch.randn(clean.shape, generator=generator, device=clean.device)
    steps = torch.randint(0, policy.config.num_train_timesteps, (clean.shape[0],),
                          generator=generator, device=clean.device)
    # diffusers annotates IntTensor; any integer tensor works
    noisy = policy.training_scheduler.add_noise(clean, noise, steps)  # type: ignore[arg-type]
    prediction = denoiser(noisy, steps, cond).float()
    target = noise if policy.config.prediction_type == "epsilon" else clean
    loss = F.mse_loss(prediction, target)
    if teacher is not None and teacher_weight > 0:
        with torch.no_grad():
            reference = teacher(noisy, steps, cond).float()
        loss = (1.0 - teacher_weight) * loss + teacher_weight * F.mse_loss(prediction, reference)
    return loss


@torch.no_grad()
def val_denoising_loss(denoiser: torch.nn.Module, policy: DiffusionPolicy, conds: ConditionSet,
                       seed: int = 0, mask: torch.Tensor | None = None) -> float:
    """DDPM loss on ``conds`` with noise and steps fixed by ``seed``: the same draws for
    every model, so figures of a U-Net, a DiT and a pruned DiT compare directly."""
    g = torch.Generator(device=conds.cond.device).manual_seed(seed)
    total, count = 0.0, 0
    for start in range(0, len(conds), VAL_BATCH):
        cond = conds.cond[start:start + VAL_BATCH]
        clean = conds.clean[start:start + VAL_BATCH]
        kwargs = {} if mask is None else {"mask": mask}
        noise = torch.randn(clean.shape, generator=g, device=clean.device)
        steps = torch.randint(0, policy.config.num_train_timesteps, (clean.shape[0],),
                              generator=g, device=clean.device)
        # diffusers annotates IntTensor; any integer tensor works
        noisy = policy.training_scheduler.add_noise(clean, noise, steps)  # type: ignore[arg-type]
        prediction = denoiser(noisy, steps, cond, **kwargs).float()
        target = noise if policy.config.prediction_type == "epsilon" else clean
        total += float(F.mse_loss(prediction, target, reduction="sum"))
        count += prediction.numel()
    return total / count


@torch.no_grad()
def demo_chunk_error(policy: DiffusionPolicy, conds: ConditionSet, steps: int | None = None,
                     seed: int = 0) -> dict[str, float]:
    """One sampled chunk per held-out condition against the demonstration's chunk:
    mean |difference| in normalised units, and in rad over the arm joints."""
    g = torch.Generator(device=conds.cond.device).manual_seed(seed)
    chunk = policy.sample(conds.cond, steps, generator=g)
    arm = slice(0, policy.config.action_dim - 1)
    physical = (policy.normalizer.unnormalize(ACTION, chunk)
                - policy.normalizer.unnormalize(ACTION, conds.clean))
    return {"chunk_error": float((chunk - conds.clean).abs().mean()),
            "chunk_error_arm_rad": float(physical[..., arm].abs().mean())}


def policy_figures(policy: DiffusionPolicy, teacher: DiffusionPolicy | None,
                   conds: ConditionSet, seed: int) -> dict[str, float]:
    """Validation figures of one policy: DDPM loss (DDIM-trained only), chunk error vs the
    demonstrations at its default steps, agreement with ``teacher``'s DDIM chunks."""
    c = policy.config
    out = {}
    if c.sampler == "ddim":
        out["val_loss"] = val_denoising_loss(policy.denoiser, policy, conds, seed)
    out.update(demo_chunk_error(policy, conds, seed=seed))
    if teacher is not None:
        steps = [1, 2, 4, c.num_inference_steps] if c.sampler == "consistency" else \
            [c.num_inference_steps]
        out.update(chunk_agreement(policy, teacher, conds, sorted(set(steps)), seed=seed))
    return out


# ---------------------------------------------------------------------------- plumbing


def _setup(config: PruneConfig, out: Path) -> torch.device:
    return open_local_run(out, config.device, config.num_threads, config.seed).device


def _conditions(policy: DiffusionPolicy, data_dirs: Sequence[str | Path], config: PruneConfig,
                cache_dir: Path, device: torch.device,
                progress: bool) -> tuple[ConditionSet, ConditionSet, str, str]:
    """Train / validation conditions of ``policy``'s encoders (cached in ``cache_dir`` as
    ``dpr distill`` caches them, so that cache serves here too)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    settings = DistillConfig(val_fraction=config.val_fraction, seed=config.seed,
                             encode_batch_size=config.encode_batch_size)
    train, val, dataset_id, fingerprint = distill_module._conditions(
        policy, [Path(d) for d in data_dirs], settings, cache_dir, device, progress)
    c = policy.config
    for name, conds in (("train", train), ("val", val)):
        if conds.cond.shape[1] != c.cond_dim or conds.clean.shape[1:] != (c.horizon,
                                                                          c.action_dim):
            raise ValueError(f"cached {name} conditions in {cache_dir} have cond "
                             f"{tuple(conds.cond.shape[1:])} and chunks "
                             f"{tuple(conds.clean.shape[1:])}; the policy needs "
                             f"({c.cond_dim},) and ({c.horizon}, {c.action_dim})")
    train = ConditionSet(*(t.to(device) for t in (train.cond, train.clean, train.state)))
    val = ConditionSet(*(t.to(device) for t in (val.cond, val.clean, val.state)))
    return train, _spread(val, config.val_samples), dataset_id, fingerprint


def _spread(conds: ConditionSet, count: int) -> ConditionSet:
    """``count`` samples evenly spaced over ``conds`` (over all its episodes rather than the
    first frames of the first one)."""
    index = torch.linspace(0, len(conds) - 1, min(len(conds), count)).round().long()
    return conds.subset(index.to(conds.cond.device))


def _copy(policy: DiffusionPolicy) -> DiffusionPolicy:
    twin = DiffusionPolicy(policy.config)
    twin.load_state_dict(policy.state_dict())
    return twin.to(next(policy.parameters()).device)


def _same_encoders(a: DiffusionPolicy, b: DiffusionPolicy) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    shared = [k for k in sa if not k.startswith("denoiser.")]
    return all(k in sb and torch.equal(sa[k].cpu(), sb[k].cpu()) for k in shared)


def _lr_lambda(warmup: int, steps: int) -> Callable[[int], float]:
    """Linear warm-up then cosine decay to 0 (as ``dpr train``)."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + np.cos(np.pi * min(1.0, progress)))
    return factor


def _fit(phase: str, module: torch.nn.Module, policy: DiffusionPolicy, train: ConditionSet,
         steps: int, lr: float, config: PruneConfig, log: JsonLog,
         validate: Callable[[], dict], device: torch.device, progress: bool,
         teacher: torch.nn.Module | None = None) -> dict:
    """AdamW + warm-up/cosine + clip + EMA on the denoising loss; ``module``'s weights end as
    their EMA (what is validated and saved)."""
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                 _lr_lambda(config.warmup_steps, steps))
    ema = EMAModel(params, decay=config.ema_decay, use_ema_warmup=True, power=0.75)
    generator = torch.Generator(device=device).manual_seed(config.seed + 1)

    def validation(step: int) -> None:
        ema.store(params)
        ema.copy_to(params)
        module.eval()
        log.write({"phase": phase, "step": step, "val": validate()})
        module.train()
        ema.restore(params)

    def checkpoint(step: int, last: bool) -> None:
        if not last:  # the caller validates the final weights
            validation(step)

    def fitting(index: int) -> dict | None:
        rows = torch.randint(0, len(train), (config.batch_size,), generator=generator,
                             device=device)
        loss = denoising_loss(module, policy, train.cond[rows], train.clean[rows], generator,
                              teacher, config.teacher_loss_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, config.grad_clip_norm)
        optimizer.step()
        schedule.step()
        ema.step(params)
        losses.append(loss.item())
        if (index + 1) % config.log_every:
            return None
        record = {"phase": phase, "step": index + 1,
                  "loss": float(np.mean(losses[-config.log_every:])),
                  "lr": schedule.get_last_lr()[0], "elapsed_s": loop.elapsed_s}
        log.write(record)
        return {"loss": f"{record['loss']:.4f}"}

    module.train()
    losses: list[float] = []
    loop = TrainingLoop(LoopConfig(steps, config.val_every, config.max_minutes), checkpoint,
                        progress=progress, desc=phase)
    steps_done = loop.run(fitting)
    ema.copy_to(params)
    module.eval()
    return {"steps_done": steps_done, **loss_summary(losses), "wall_s": loop.elapsed_s}


# ---------------------------------------------------------------------------- stages


def dit_policy_from(source: DiffusionPolicy, dit_fields: dict) -> DiffusionPolicy:
    """``source``'s encoders, fusion, heads and normaliser with a fresh full DiT denoiser
    (``dit_fields``: values of ``DENOISER_FIELDS``)."""
    values = policy_config_to_dict(source.config)
    values.update({k: dit_fields[k] for k in DENOISER_FIELDS}, keep_layers=[], sampler="ddim")
    policy = DiffusionPolicy(policy_config_from_dict(values))
    state, own = source.state_dict(), policy.state_dict()
    policy.load_state_dict({k: own[k] if k.startswith("denoiser.") else state[k] for k in own},
                           strict=True)
    return policy.to(next(source.parameters()).device)


def train_teacher(source_dir: str | Path, data_dirs: Sequence[str | Path], config: PruneConfig,
                  out: str | Path, conditions_dir: str | Path | None = None,
                  progress: bool = True) -> Path:
    """Train a full DiT denoiser on the conditions of the checkpoint in ``source_dir``."""
    out = Path(out)
    device = _setup(config, out)
    source, source_meta = load_checkpoint(source_dir, device=device)
    if source.config.sampler != "ddim":
        raise ValueError(f"{source_dir} is a consistency student; start from a DDIM-trained "
                         "checkpoint")
    train, val, dataset_id, fingerprint = _conditions(
        source, data_dirs, config, Path(conditions_dir or out), device, progress)
    dit_fields = dataclasses.asdict(load_policy_config(config.dit_config))
    if dit_fields["denoiser"] != "dit":
        raise ValueError(f"dit_config {config.dit_config} has denoiser "
                         f"{dit_fields['denoiser']}, expected dit")
    policy = dit_policy_from(source, dit_fields)
    policy.requires_grad_(False)
    policy.denoiser.requires_grad_(True)
    log = JsonLog(out / "log.jsonl")
    seed = config.seed

    def validate() -> dict:
        return policy_figures(policy, None, val, seed)

    reference = {"source_val_loss": val_denoising_loss(source.denoiser, source, val, seed),
                 **{f"source_{k}": v for k, v in demo_chunk_error(source, val, seed=seed).items()}}
    log.write({"phase": "teacher", "step": 0, "reference": reference,
               "parameters": policy.parameter_counts(), "train_samples": len(train)})
    result = _fit("teacher", policy.denoiser, policy, train, config.teacher_steps,
                  config.teacher_lr, config, log, validate, device, progress)
    final = policy_figures(policy, source, val, seed)
    log.write({"phase": "teacher", "step": result["steps_done"], "val": final})
    extra = {"prune": {"stage": "teacher", "source": str(Path(source_dir).resolve()),
                       "source_weights_sha256": source_meta.get("weights_sha256"),
                       "config": dataclasses.asdict(config), **result,
                       "train_samples": len(train), "val_samples": len(val),
                       "val": final, "reference": reference}}
    return save_checkpoint(policy, out / "checkpoint", dataset_id=dataset_id,
                           dataset_hash=fingerprint, extra=extra)


def _load_full_dit(teacher_dir: str | Path, device: torch.device) -> tuple[DiffusionPolicy, dict]:
    teacher, meta = load_checkpoint(teacher_dir, device=device)
    c = teacher.config
    if c.denoiser != "dit":
        raise ValueError(f"{teacher_dir} has a {c.denoiser} denoiser; layer pruning needs a "
                         "DiT (train one with --stage teacher)")
    if c.keep_layers:
        raise ValueError(f"{teacher_dir} is already pruned (keep_layers {c.keep_layers}); "
                         "prune from the full DiT")
    if c.sampler != "ddim":
        raise ValueError(f"{teacher_dir} is a consistency student; use the DDIM-trained DiT")
    return teacher, meta


@torch.no_grad()
def mask_losses(teacher: DiffusionPolicy, pattern: NMPattern, conds: ConditionSet,
                seed: int) -> list[dict]:
    """DDPM loss on ``conds`` of the full teacher under every N:M mask, without retraining
    (the immediate loss of each choice), best first; empty past ``MAX_MASKS`` masks."""
    assert isinstance(teacher.denoiser, DiffusionTransformer)  # a DiT teacher
    gated = GatedDiT(teacher.denoiser, pattern).to(conds.cond.device).eval()
    rows = []
    try:
        choices = candidate_masks(pattern)
        if len(choices) ** gated.groups > MAX_MASKS:
            return []
        for combo in torch.cartesian_prod(*[torch.arange(len(choices))] * gated.groups) \
                .reshape(-1, gated.groups):
            mask = torch.cat([choices[i] for i in combo]).to(conds.cond.device)
            kept = [gated.layer_ids[p] for p in mask.nonzero().flatten().tolist()]
            rows.append({"keep_layers": kept,
                         "val_loss": val_denoising_loss(gated, teacher, conds, seed, mask)})
    finally:
        gated.remove_hooks()
    return sorted(rows, key=lambda r: r["val_loss"])


def prune(teacher_dir: str | Path, data_dirs: Sequence[str | Path], config: PruneConfig,
          out: str | Path, conditions_dir: str | Path | None = None,
          progress: bool = True) -> Path:
    """Gate training, selection and fine-tuning of an N:M-pruned copy of the full DiT in
    ``teacher_dir``; return the pruned checkpoint (``out/checkpoint``)."""
    out = Path(out)
    device = _setup(config, out)
    pattern = config.nm
    teacher, teacher_meta = _load_full_dit(teacher_dir, device)
    pattern.check(teacher.config.dit_layers)
    train, val, dataset_id, fingerprint = _conditions(
        teacher, data_dirs, config, Path(conditions_dir or out), device, progress)
    seed = config.seed
    log = JsonLog(out / "log.jsonl")
    teacher.requires_grad_(False)

    student = _copy(teacher)
    student.requires_grad_(False)
    student.denoiser.requires_grad_(True)
    assert isinstance(student.denoiser, DiffusionTransformer)  # a DiT teacher's copy
    gated = GatedDiT(student.denoiser, pattern).to(device)
    importance = importance_distribution(student.denoiser)
    # On training conditions: the immediate_loss selection must not look at held-out data.
    candidates = mask_losses(teacher, pattern, _spread(train, config.val_samples), seed)
    if config.selection == "immediate_loss" and not candidates:
        raise ValueError(f"selection immediate_loss tries every mask; {pattern} on "
                         f"{teacher.config.dit_layers} blocks has more than {MAX_MASKS}")
    log.write({"phase": "gates", "step": 0, "pattern": str(pattern),
               "selection_rule": config.selection, "importance_p": importance.tolist(),
               "gate_logits": gated.gate_logits.tolist(),
               "keep_probabilities": gated.keep_probabilities().tolist(),
               "selection": gated.selected_layers(), "mask_losses": candidates[:5]})
    gate_result = None
    if config.selection == "gates":
        gate_result = _train_gates(gated, student, teacher, train, val, config, log, device,
                                   progress)
    gated.remove_hooks()
    # "importance": the logits never trained, so the selection is the SVD initialisation's.
    kept = candidates[0]["keep_layers"] if config.selection == "immediate_loss" \
        else gated.selected_layers()
    pruned = prune_policy(student, kept)
    pruned.requires_grad_(False)
    pruned.denoiser.requires_grad_(True)
    before = policy_figures(pruned, teacher, val, seed)
    log.write({"phase": "finetune", "step": 0, "keep_layers": kept, "val": before})
    result = _fit("finetune", pruned.denoiser, pruned, train, config.finetune_steps,
                  config.finetune_lr, config, log,
                  lambda: policy_figures(pruned, teacher, val, seed), device, progress,
                  teacher=teacher.denoiser)
    final = policy_figures(pruned, teacher, val, seed)
    log.write({"phase": "finetune", "step": result["steps_done"], "val": final})
    teacher_figures = policy_figures(teacher, None, val, seed)
    gates = {"pattern": str(pattern), "selection_rule": config.selection,
             "layer_ids": gated.layer_ids,
             "importance_p": importance.tolist(),
             "initial_logits": importance.log().tolist(),
             "final_logits": gated.gate_logits.tolist(),
             "keep_probabilities": gated.keep_probabilities().tolist(),
             "keep_layers": kept, "mask_losses": candidates}
    (out / "gates.json").write_text(json.dumps(gates, indent=2) + "\n", encoding="utf-8")
    extra = {"prune": {"stage": "prune", "teacher": str(Path(teacher_dir).resolve()),
                       "teacher_weights_sha256": teacher_meta.get("weights_sha256"),
                       "config": dataclasses.asdict(config), "pattern": str(pattern),
                       "selection_rule": config.selection, "keep_layers": kept,
                       "gates": gate_result, "finetune": result,
                       "train_samples": len(train), "val_samples": len(val),
                       "val_after_gates": before, "val": final, "teacher_val": teacher_figures,
                       "best_mask_without_training": candidates[0]}}
    return save_checkpoint(pruned, out / "checkpoint", dataset_id=dataset_id,
                           dataset_hash=fingerprint, extra=extra)


def _train_gates(gated: GatedDiT, student: DiffusionPolicy, teacher: DiffusionPolicy,
                 train: ConditionSet, val: ConditionSet, config: PruneConfig, log: JsonLog,
                 device: torch.device, progress: bool) -> dict:
    """Gate logits (Adam, ``gate_lr``) and DiT weights (AdamW, ``gate_weight_lr``) together,
    each sample under its own hard Gumbel mask; tau falls geometrically."""
    weights = [p for p in gated.dit.parameters() if p.requires_grad]
    groups = [{"params": [gated.gate_logits], "lr": config.gate_lr, "weight_decay": 0.0}]
    if config.gate_weight_lr > 0:
        groups.append({"params": weights, "lr": config.gate_weight_lr,
                       "weight_decay": config.weight_decay})
    else:
        gated.dit.requires_grad_(False)
    optimizer = torch.optim.AdamW(groups)
    generator = torch.Generator(device=device).manual_seed(config.seed + 2)
    steps = config.gate_steps

    def checkpoint(step: int, last: bool) -> None:
        if last:  # the caller validates the selection it keeps
            return
        gated.eval()
        log.write({"phase": "gates", "step": step, "selection": gated.selected_layers(),
                   "keep_probabilities": gated.keep_probabilities().tolist(),
                   "val": {"val_loss_selection": val_denoising_loss(gated, student, val,
                                                                    config.seed)}})
        gated.train()

    def gate_step(index: int) -> dict | None:
        gated.tau = config.tau_start * (config.tau_end / config.tau_start) ** (
            index / max(1, steps - 1))
        rows = torch.randint(0, len(train), (config.batch_size,), generator=generator,
                             device=device)
        loss = denoising_loss(gated, student, train.cond[rows], train.clean[rows], generator,
                              teacher.denoiser, config.teacher_loss_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip_norm > 0 and config.gate_weight_lr > 0:
            torch.nn.utils.clip_grad_norm_(weights, config.grad_clip_norm)
        optimizer.step()
        losses.append(loss.item())
        if (index + 1) % config.log_every:
            return None
        log.write({"phase": "gates", "step": index + 1,
                   "loss": float(np.mean(losses[-config.log_every:])), "tau": gated.tau,
                   "gate_logits": [round(v, 4) for v in gated.gate_logits.tolist()],
                   "elapsed_s": loop.elapsed_s})
        return {"loss": f"{np.mean(losses[-config.log_every:]):.4f}",
                "keep": ",".join(map(str, gated.selected_layers()))}

    gated.train()
    losses: list[float] = []
    loop = TrainingLoop(LoopConfig(steps, config.val_every, config.max_minutes), checkpoint,
                        progress=progress, desc="gates")
    steps_done = loop.run(gate_step)
    gated.eval()
    return {"steps_done": steps_done, **loss_summary(losses), "wall_s": loop.elapsed_s,
            "selection": gated.selected_layers(),
            "keep_probabilities": gated.keep_probabilities().tolist()}


def distill_pruned(teacher_dir: str | Path, student_dir: str | Path,
                   data_dirs: Sequence[str | Path], config: PruneConfig,
                   distill_config: DistillConfig, out: str | Path,
                   conditions_dir: str | Path | None = None, progress: bool = True) -> Path:
    """Consistency-distil the pruned checkpoint in ``student_dir`` from the full DiT in
    ``teacher_dir`` (LightDP: student pruned, teacher full); settings from
    ``distill_config`` as ``dpr distill``. Returns ``out/checkpoint``."""
    out = Path(out)
    device = _setup(config, out)
    teacher, teacher_meta = _load_full_dit(teacher_dir, device)
    pruned, pruned_meta = load_checkpoint(student_dir, device=device)
    if pruned.config.denoiser != "dit" or pruned.config.sampler != "ddim":
        raise ValueError(f"{student_dir}: expected a DDIM-sampled DiT student (dpr prune "
                         f"output), got {pruned.config.denoiser} / {pruned.config.sampler}")
    if not _same_encoders(teacher, pruned):
        raise ValueError(f"{student_dir} and {teacher_dir} differ outside the denoiser; the "
                         "student must keep the teacher's encoders (one set of conditions)")
    if distill_config.init_student:
        raise ValueError("init_student is dpr distill's; here the student starts from "
                         f"--student {student_dir}")
    train, val, dataset_id, fingerprint = _conditions(
        teacher, data_dirs, config, Path(conditions_dir or out), device, progress)
    anchors = cached_anchors(teacher, train, distill_config, out, fingerprint, device)
    student = DiffusionPolicy(student_config(pruned.config, distill_config))
    student.load_state_dict(pruned.state_dict())
    student.to(device)
    distiller = ConsistencyDistiller(teacher.denoiser, student.denoiser,
                                     student.consistency_schedule.to(device),
                                     teacher.consistency_schedule.to(device))
    evaluated = _copy(student).eval()
    evaluated.denoiser = distiller.target
    log = JsonLog(out / "log.jsonl")
    seed = config.seed

    def validation(step: int) -> dict:
        figures = policy_figures(evaluated, teacher, val, seed)
        log.write({"phase": "distill", "step": step, "val": figures})
        return figures

    dc = distill_config
    optimizer, schedule = student_optimizer(distiller, dc)
    generator = torch.Generator(device=device).manual_seed(dc.seed)
    initial = validation(0)

    def checkpoint(step: int, last: bool) -> None:
        if not last:  # the final figures go with the checkpoint below
            validation(step)

    def distillation(index: int) -> dict | None:
        loss, rate = distillation_step(distiller, optimizer, schedule, train, anchors, dc, index,
                                       generator)
        losses.append(loss)
        if (index + 1) % dc.log_every:
            return None
        record = {"phase": "distill", "step": index + 1,
                  "loss": float(np.mean(losses[-dc.log_every:])), "target_ema": rate,
                  "lr": schedule.get_last_lr()[0], "elapsed_s": loop.elapsed_s}
        log.write(record)
        return {"loss": f"{record['loss']:.4f}"}

    losses: list[float] = []
    loop = TrainingLoop(LoopConfig(dc.steps, dc.val_every, dc.max_minutes), checkpoint,
                        progress=progress, desc="distill")
    steps_done = loop.run(distillation)
    final = validation(steps_done)
    extra = {"prune": {"stage": "distill", "teacher": str(Path(teacher_dir).resolve()),
                       "teacher_weights_sha256": teacher_meta.get("weights_sha256"),
                       "student": str(Path(student_dir).resolve()),
                       "student_weights_sha256": pruned_meta.get("weights_sha256"),
                       "keep_layers": pruned.config.keep_layers},
             "distill": {"config": dataclasses.asdict(dc), "steps_done": steps_done,
                         "train_samples": len(train), **loss_summary(losses),
                         "val_before": initial, "val_after": final,
                         "wall_s": loop.elapsed_s}}
    return save_checkpoint(evaluated, out / "checkpoint", dataset_id=dataset_id,
                           dataset_hash=fingerprint, extra=extra)
