"""``TrainConfig``: optimisation settings of ``dpr train`` (``config/train.yaml``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from diffusion_policy_ros.config import (
    CONFIG_DIR,
    config_from_params,
    param,
    read_field_mapping,
)


@dataclasses.dataclass
class TrainConfig:
    steps: int = param(20000, "Optimiser steps in total (the cosine schedule's length)",
                       low=1, high=10_000_000)
    batch_size: int = param(64, "Samples per step on each process", low=1, high=4096)
    lr: float = param(3.0e-4, "AdamW peak learning rate", low=1e-7, high=1.0)
    weight_decay: float = param(1.0e-6, "AdamW weight decay", low=0.0, high=1.0)
    warmup_steps: int = param(500, "Linear learning-rate warm-up steps", low=0, high=1_000_000)
    ema_decay: float = param(0.9999, "Largest EMA decay (warmed up as 1 - (1 + step)^-0.75)",
                             low=0.0, high=1.0)
    grad_clip_norm: float = param(1.0, "Gradient norm clip", low=0.0, high=1e6)
    val_fraction: float = param(0.05, "Share of episodes held out for validation",
                                low=0.0, high=0.5)
    seed: int = param(0, "Seed of the split, shuffling, augmentation and noise", low=0,
                      high=2**31 - 1)
    checkpoint_every: int = param(1000, "Steps between checkpoints (+ one at the end)",
                                  low=1, high=10_000_000)
    val_every: int = param(1000, "Steps between validation losses (EMA weights)", low=1,
                           high=10_000_000)
    log_every: int = param(50, "Steps between JSONL log lines", low=1, high=1_000_000)
    precision: str = param("auto", "Autocast: auto (bf16 on cuda/npu, fp32 on cpu) | fp32 | "
                           "bf16 | fp16; the loss is always computed in fp32",
                           choices=("auto", "fp32", "bf16", "fp16"))
    device: str = param("auto", "auto | cpu | cuda | npu", choices=("auto", "cpu", "cuda", "npu"))
    num_threads: int = param(0, "torch intra-op threads on the CPU; 0 = torch's default",
                             low=0, high=256)
    early_frames: int = param(
        0, "Oversample the first N frames of every episode: there the arm has not moved yet "
        "and only the scene and the instruction say where to go, while later frames can be "
        "predicted from the arm's own motion (a shortcut that left the first chunk blind)",
        low=0, high=10_000)
    early_frame_repeat: int = param(1, "How many times each of those frames is in an epoch",
                                    low=1, high=1000)
    colour_swap_prob: float = param(
        0.0, "Share of samples whose object colours (image, point colours) and instruction "
        "colour word are permuted within each shape (learning.augmentation.ColourSwap)",
        low=0.0, high=1.0)
    init_from: str = param("", "Warm start: copy the weights of this checkpoint directory "
                           "wherever name and shape match the new model (the rest keep their "
                           "initialisation); the normaliser comes from the data. '' = none")
    grounding_lr_scale: float = param(
        1.0, "Learning-rate multiplier of the policy's grounding module (policy/grounding.py):"
        " its colour-keyed softmax must grow logit gaps of ~10 from near-uniform weights, "
        "which at the base rate took ~3x more steps", low=0.01, high=100.0)
    max_minutes: float = param(0.0, "Stop (with a checkpoint) after this wall time; 0 = no "
                               "limit. The schedule still spans `steps`", low=0.0, high=1e6)


def load_train_config(path: str | Path = CONFIG_DIR / "train.yaml") -> TrainConfig:
    values = read_field_mapping(path, TrainConfig)
    return config_from_params(TrainConfig, values)
