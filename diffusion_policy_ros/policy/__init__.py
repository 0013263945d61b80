"""Language-conditioned multimodal diffusion policy (pure torch, no rclpy).

Layout, following lerobot / Chi et al.'s diffusion_policy:

- ``configuration_diffusion``: ``DiffusionPolicyConfig`` (To / T / Ta documented
  there) and ``load_policy_config`` for ``config/policy_{unet,dit}.yaml``.
- ``modeling_diffusion``: ``DiffusionPolicy`` = RGB CNN (``vision``) + PointNet
  (``pointnet``) + proprioception MLP (``proprio``) + frozen sentence embedding
  (``language``) -> cross-modal attention (``fusion``) -> FiLM U-Net (``unet1d``)
  or DiT (``dit``), DDPM training / DDIM sampling (``schedulers``), min-max
  normaliser (``normalizer``) kept in the weights.
- ``features``: batch keys and shapes.
- ``checkpoint``: safetensors + JSON checkpoints and their errors.
- ``runner``: ``PolicyRunner`` (numpy in / out, device, precision, warm-up,
  per-stage timing; ``devices``, ``timing``). Its benchmarks (``dpr bench policy``,
  ``dpr bench lightdp``) are in ``diffusion_policy_ros.bench``.

Only the config is imported here; the model modules are imported on use so
that reading a config does not pull in torch and diffusers.
"""

from diffusion_policy_ros.policy.configuration_diffusion import (
    DiffusionPolicyConfig,
    load_policy_config,
)

__all__ = ["DiffusionPolicyConfig", "load_policy_config"]
