"""The tiny model and fixed batch shared by test_ddp.py and ddp_worker.py."""

import torch

from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
from diffusion_policy_ros.policy.features import (
    ACTION,
    IMAGE,
    LANGUAGE,
    POINTS_RGB,
    POINTS_XYZ,
    STATE,
)
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy

TINY = dict(image_base_channels=8, image_stages=2, image_token_grid=2, norm_groups=4,
            point_feature_dim=32, point_tokens=4, fusion_dim=32, fusion_layers=1,
            fusion_heads=2, cond_dim=32, timestep_embed_dim=32, unet_base_dim=16,
            unet_levels=2, num_points=64, image_size=[32, 32], image_crop_size=[32, 32])
B = 4


def make_inputs():
    g = torch.Generator().manual_seed(0)
    batch = {IMAGE: torch.rand(B, 2, 3, 32, 32, generator=g),
             POINTS_XYZ: torch.rand(B, 2, 64, 3, generator=g),
             POINTS_RGB: torch.rand(B, 2, 64, 3, generator=g),
             STATE: torch.rand(B, 2, 7, generator=g), LANGUAGE: torch.rand(B, 384, generator=g),
             ACTION: torch.rand(B, 16, 7, generator=g)}
    return batch, torch.randn(B, 16, 7, generator=g), torch.randint(0, 100, (B,), generator=g)


def make_model() -> DiffusionPolicy:
    torch.manual_seed(1)
    return DiffusionPolicy(DiffusionPolicyConfig(**TINY)).eval()
