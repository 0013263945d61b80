"""``PruneConfig``: settings of ``dpr prune`` (``config/prune.yaml``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from diffusion_policy_ros.config import (
    CONFIG_DIR,
    ConfigError,
    config_from_params,
    param,
    read_field_mapping,
)
from diffusion_policy_ros.policy.pruning import NMPattern


@dataclasses.dataclass
class PruneConfig:
    pattern: str = param("3:4", "N:M local blocks: keep N of every M consecutive DiT blocks "
                         "(3:4 takes 8 blocks to 6, 2:4 to 4)")
    dit_config: str = param(
        "policy_dit", "Stage teacher: policy config (name in config/ or path) whose denoiser "
        "fields (denoiser, dit_*, timestep_embed_dim) replace the source checkpoint's")
    teacher_steps: int = param(6000, "Stage teacher: optimiser steps of the full DiT denoiser",
                               low=1, high=10_000_000)
    teacher_lr: float = param(5.0e-4, "Stage teacher: AdamW peak learning rate", low=1e-8,
                              high=1.0)
    selection: str = param(
        "gates", "Stage prune: which blocks stay: gates (learnt, LightDP) | importance (the "
        "SVD-importance initialisation alone, no gate training) | immediate_loss (every N:M "
        "mask tried on the full teacher without retraining, the lowest DDPM loss on training "
        "conditions kept); the last two are baselines for the learnt gates",
        choices=("gates", "importance", "immediate_loss"))
    gate_steps: int = param(
        800, "Stage prune: steps of joint gate + weight training under Gumbel N:M masks",
        low=1, high=10_000_000)
    gate_lr: float = param(0.02, "Stage prune: Adam learning rate of the gate logits", low=1e-6,
                           high=10.0)
    gate_weight_lr: float = param(1.0e-4, "Stage prune: AdamW learning rate of the DiT weights "
                                  "while the gates train", low=0.0, high=1.0)
    tau_start: float = param(4.0, "Stage prune: Gumbel-softmax temperature at the first gate "
                             "step (annealed geometrically) ...", low=1e-3, high=100.0)
    tau_end: float = param(0.1, "... to this at the last gate step", low=1e-3, high=100.0)
    finetune_steps: int = param(2000, "Stage prune: fine-tuning steps of the pruned model "
                                "(no masks)", low=0, high=10_000_000)
    finetune_lr: float = param(2.0e-4, "Stage prune: AdamW peak learning rate of the "
                               "fine-tuning", low=1e-8, high=1.0)
    teacher_loss_weight: float = param(
        0.0, "Stage prune: weight w of output matching against the full teacher in the gate "
        "and fine-tuning losses: (1 - w) * DDPM loss + w * |student - teacher noise "
        "prediction|^2 (0 = DDPM loss only)", low=0.0, high=1.0)
    batch_size: int = param(256, "Samples per step (precomputed conditions + clean chunks)",
                            low=1, high=65536)
    weight_decay: float = param(0.0, "AdamW weight decay", low=0.0, high=1.0)
    warmup_steps: int = param(200, "Linear learning-rate warm-up steps before the cosine decay "
                              "(teacher and fine-tuning)", low=0, high=1_000_000)
    grad_clip_norm: float = param(1.0, "Gradient norm clip", low=0.0, high=1e6)
    ema_decay: float = param(0.999, "Largest EMA decay of the saved weights (warm-up 1 - "
                             "(1 + step)^-0.75 as dpr train)", low=0.0, high=1.0)
    val_fraction: float = param(0.05, "Share of episodes held out when the conditions are not "
                                "cached yet", low=0.0, high=0.5)
    val_every: int = param(500, "Steps between validation figures", low=1, high=10_000_000)
    val_samples: int = param(512, "Held-out samples per validation, evenly spaced over the "
                             "held-out episodes", low=1, high=100_000)
    log_every: int = param(50, "Steps between JSONL log lines", low=1, high=1_000_000)
    encode_batch_size: int = param(64, "Samples per encoder batch when precomputing the "
                                   "conditions", low=1, high=4096)
    seed: int = param(0, "Seed of the batches, noise and gate draws", low=0, high=2**31 - 1)
    device: str = param("auto", "auto | cpu | cuda | npu", choices=("auto", "cpu", "cuda", "npu"))
    num_threads: int = param(0, "torch intra-op threads on the CPU; 0 = torch's default",
                             low=0, high=256)
    max_minutes: float = param(0.0, "Stop each training phase after this wall time (minutes) "
                               "and go on; 0 = no limit", low=0.0, high=1e6)

    def validate(self) -> None:
        NMPattern.parse(self.pattern)

    @property
    def nm(self) -> NMPattern:
        return NMPattern.parse(self.pattern)


def load_prune_config(path: str | Path = CONFIG_DIR / "prune.yaml",
                      overrides: dict | None = None) -> PruneConfig:
    values = read_field_mapping(path, PruneConfig)
    if isinstance(values.get("pattern"), int):
        raise ConfigError(f"{path}: write the N:M pattern in quotes, e.g. pattern: \"3:4\" "
                          f"(YAML reads an unquoted N:M as a base-60 number, here "
                          f"{values['pattern']})")
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return config_from_params(PruneConfig, values)
