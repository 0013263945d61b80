"""``DistillConfig``: settings of ``dpr distill`` (``config/distill.yaml``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from diffusion_policy_ros.config import (
    CONFIG_DIR,
    load_field_mapping,
    param,
)


@dataclasses.dataclass
class DistillConfig:
    steps: int = param(3000, "Optimiser steps", low=1, high=10_000_000)
    batch_size: int = param(256, "Samples per step (precomputed conditions + clean chunks)",
                            low=1, high=65536)
    lr: float = param(5.0e-5, "AdamW peak learning rate of the student", low=1e-8, high=1.0)
    weight_decay: float = param(0.0, "AdamW weight decay", low=0.0, high=1.0)
    warmup_steps: int = param(100, "Linear learning-rate warm-up steps", low=0,
                              high=1_000_000)
    grad_clip_norm: float = param(1.0, "Gradient norm clip", low=0.0, high=1e6)
    target_ema_start: float = param(
        0.95, "EMA rate of the target network at the first step", low=0.0, high=1.0)
    target_ema_end: float = param(
        0.999, "EMA rate of the target network at the last step (raised linearly)",
        low=0.0, high=1.0)
    consistency_skip: int = param(
        10, "DDPM timesteps the teacher's DDIM solver hops per target (the student's time "
        "grid)", low=1, high=1000)
    sampling_steps: int = param(
        1, "Consistency steps the student samples with by default (1, 2, 4, ...)", low=1,
        high=1000)
    num_samples: int = param(
        0, "Chunks per observation (medoid) the student samples by default; 0 = the "
        "teacher's", low=0, high=64)
    student_prediction_type: str = param(
        "sample", "What the student's denoiser outputs: sample = the clean chunk (x0) "
        "directly; epsilon = the noise, as the teacher (its clean estimate at the grid's "
        "top divides the noise error by sqrt(alpha_bar), which a one-step student cannot "
        "afford)", choices=("sample", "epsilon"))
    chunk_lowpass_terms: int = param(
        0, "The student's low-pass of sampled arm paths (cosine terms kept, "
        "policy/chunk_smoothing.py); 0 = off", low=0, high=1000)
    anchor_weight: float = param(
        0.0, "Weight of the anchor term: the student's first sampling step (pure noise at "
        "the grid's top) against the teacher's DDIM chunk from the same noise, one seeded "
        "noise per training condition (0 = the consistency loss alone)", low=0.0, high=1e3)
    student_unet_base_dim: int = param(
        0, "Full-resolution channels of a narrower U-Net student (doubled per level, as the "
        "teacher's); it starts from random weights and the rest of the policy stays the "
        "teacher's; 0 = the teacher's width, starting from its weights", low=0, high=4096)
    init_student: str = param(
        "", "Start the student (and its target network) from this earlier dpr distill "
        "checkpoint of the same teacher to continue distilling; '' = from the teacher")
    val_fraction: float = param(0.05, "Share of episodes held out for the validation figures",
                                low=0.0, high=0.5)
    val_every: int = param(500, "Steps between validation figures", low=1, high=10_000_000)
    val_samples: int = param(256, "Held-out samples per validation", low=1, high=100_000)
    log_every: int = param(50, "Steps between JSONL log lines", low=1, high=1_000_000)
    encode_batch_size: int = param(64, "Samples per teacher-encoder batch when precomputing "
                                   "the conditions", low=1, high=4096)
    seed: int = param(0, "Seed of the split, batches and noise", low=0, high=2**31 - 1)
    device: str = param("auto", "auto | cpu | cuda | npu", choices=("auto", "cpu", "cuda", "npu"))
    num_threads: int = param(0, "torch intra-op threads on the CPU; 0 = torch's default",
                             low=0, high=256)
    max_minutes: float = param(0.0, "Stop (with the checkpoint) after this wall time; 0 = no "
                               "limit", low=0.0, high=1e6)


def load_distill_config(path: str | Path = CONFIG_DIR / "distill.yaml",
                        overrides: dict | None = None) -> DistillConfig:
    return load_field_mapping(DistillConfig, path, overrides)
