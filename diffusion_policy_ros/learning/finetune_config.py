"""``FinetuneConfig``: settings of ``dpr finetune`` (``config/finetune.yaml``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from diffusion_policy_ros.config import (
    CONFIG_DIR,
    load_field_mapping,
    param,
)


@dataclasses.dataclass
class FinetuneConfig:
    iterations: int = param(40, "PPO iterations (rollouts + update)", low=1, high=1_000_000)
    num_envs: int = param(2, "Simulations per process, each in its own worker process; the "
                          "policy runs batched over them", low=1, high=256)
    vector_env: str = param("async", "async: one worker process per env (gymnasium "
                            "AsyncVectorEnv); sync: in this process (tests, debugging)",
                            choices=("async", "sync"))
    steps_per_env: int = param(256, "Control steps each env collects per iteration; episodes "
                               "are run to their end, so an iteration holds whole episodes",
                               low=1, high=1_000_000)
    time_limit_s: float = param(20.0, "Episode time limit (sim s), as dpr eval's", low=0.1,
                                high=3600.0)
    depth_noise: bool = param(False, "Train with the simulated Kinect's time-of-flight noise")
    switch_probability: float = param(0.0, "Share of episodes that start with another "
                                      "object's instruction, replaced after 1 s of sim time",
                                      low=0.0, high=1.0)
    rules: str = param("", "policy_node parameter file whose chunk rules (grasp_retry.*, "
                       "grasp_lift.*) act on every rollout's chunks, as in policy_node and dpr "
                       "eval --rules, e.g. config/grasp_rules.yaml; empty = none")
    success_weight: float = param(5.0, "Reward weight of success", low=0.0, high=1e4)
    distance_weight: float = param(0.8, "Reward weight of the tool-to-target distance "
                                   "improvement (m)", low=0.0, high=1e4)
    smoothness_weight: float = param(0.2, "Reward weight of -||a_t - a_{t-1}|| (executed "
                                     "joint references)", low=0.0, high=1e4)
    gamma: float = param(0.99, "Discount per control step", low=0.0, high=1.0)
    gae_lambda: float = param(0.95, "GAE lambda", low=0.0, high=1.0)
    clip: float = param(0.1, "PPO ratio clip", low=0.0, high=10.0)
    kl_weight: float = param(0.1, "Weight of KL(pi || imitation policy), exact for the "
                             "two Gaussians around the same noise", low=0.0, high=1e4)
    target_kl: float = param(0.02, "Stop an iteration's epochs early once the mean "
                             "approx KL(old || new) passes this; 0 = never", low=0.0, high=10.0)
    value_weight: float = param(0.5, "Weight of the value loss", low=0.0, high=1e4)
    epochs: int = param(4, "Passes over an iteration's samples", low=1, high=1000)
    minibatches: int = param(4, "Minibatches per epoch (the same count on every rank)",
                             low=1, high=100_000)
    lr: float = param(5.0e-6, "AdamW learning rate of the denoiser", low=0.0, high=1.0)
    encoder_lr: float = param(3.0e-6, "Learning rate of encoders and fusion in the joint "
                              "stage", low=0.0, high=1.0)
    value_lr: float = param(1.0e-3, "Learning rate of the value network", low=0.0, high=1.0)
    grad_clip_norm: float = param(1.0, "Gradient norm clip", low=0.0, high=1e6)
    std_start: float = param(0.04, "Exploration std of the arm path coefficients at the "
                             "first iteration (normalised action units)", low=1e-4, high=10.0)
    std_min: float = param(0.02, "Exploration std from std_decay_iterations on (min std)",
                           low=1e-4, high=10.0)
    std_decay_iterations: int = param(30, "Iterations over which the std falls linearly "
                                      "to std_min", low=0, high=1_000_000)
    critic_warmup_iterations: int = param(3, "First iterations that train only the value "
                                          "network (the policy is kept as imitation left it)",
                                          low=0, high=1_000_000)
    frozen_iterations: int = param(1_000_000, "Stage 1: iterations with the encoders frozen "
                                   "and their conditions cached per observation; after "
                                   "that the joint stage trains encoders and fusion too "
                                   "(gradient checkpointing through the frame encoders)",
                                   low=0, high=1_000_000)
    value_hidden: int = param(256, "Hidden width of the value network", low=8, high=8192)
    precision: str = param("auto", "Policy autocast: auto (bf16 on cuda/npu, fp32 on CPU) | "
                           "fp32 | bf16 | fp16; the value network is always fp32",
                           choices=("auto", "fp32", "bf16", "fp16"))
    checkpoint_every: int = param(5, "Iterations between checkpoints (policy + exact "
                                  "resume state)", low=1, high=1_000_000)
    replay_report: str = param("", "A dpr eval --report JSON of training seeds: the seeds "
                               "its episodes failed are replayed (a curriculum of the "
                               "starting policy's failures); empty = none")
    replay_probability: float = param(0.0, "Share of episodes drawn from the replayed "
                                      "failures instead of a fresh seed", low=0.0, high=1.0)
    seed: int = param(100_000, "Seed of the first training episode (env g of G takes "
                      "seed + g + k * G); far from the held-out 5000-5099", low=0,
                      high=2**31 - 1)
    device: str = param("auto", "auto | cpu | cuda | npu", choices=("auto", "cpu", "cuda", "npu"))
    num_threads: int = param(1, "torch intra-op threads of the learner; 0 = torch's default",
                             low=0, high=256)
    update_threads: int = param(0, "torch intra-op threads of the PPO update, during which "
                                "the rollout workers wait; 0 = this machine's cores shared "
                                "among its ranks", low=0, high=256)
    max_minutes: float = param(0.0, "Stop after the iteration that passes this wall time "
                               "(checkpoint written); 0 = no limit", low=0.0, high=1e6)


def load_finetune_config(path: str | Path = CONFIG_DIR / "finetune.yaml",
                         overrides: dict | None = None) -> FinetuneConfig:
    return load_field_mapping(FinetuneConfig, path, overrides)
