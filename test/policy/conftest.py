"""Shared fixtures of the policy tests: tiny configs, random batches, one language model."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from diffusion_policy_ros.policy import features as keys
from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
from diffusion_policy_ros.policy.language import LanguageEmbedder

TINY = DiffusionPolicyConfig(
    image_size=[32, 32], image_crop_size=[28, 28], num_points=64, image_base_channels=8,
    image_stages=2, image_token_grid=2, norm_groups=4, point_feature_dim=32, point_tokens=4,
    fusion_dim=32, fusion_heads=2, cond_dim=32, timestep_embed_dim=16, unet_base_dim=16,
    unet_levels=2, unet_kernel_size=3, dit_width=32, dit_layers=3, dit_heads=2)


def tiny_config(**changes) -> DiffusionPolicyConfig:
    """A policy small enough to train in seconds on two cores."""
    return dataclasses.replace(TINY, **changes)


def random_batch(config: DiffusionPolicyConfig, batch: int, seed: int = 0,
                 with_action: bool = True) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    to, n, d = config.n_obs_steps, config.num_points, config.action_dim
    h, w = config.image_size
    language = torch.randn(batch, config.language_dim, generator=g)
    out = {
        keys.IMAGE: torch.randint(0, 256, (batch, to, 3, h, w), dtype=torch.uint8, generator=g),
        keys.POINTS_XYZ: torch.rand(batch, to, n, 3, generator=g) * torch.tensor([0.7, 0.9, 0.5])
        + torch.tensor([0.15, -0.45, 0.0]),
        keys.POINTS_RGB: torch.randint(0, 256, (batch, to, n, 3), dtype=torch.uint8, generator=g),
        keys.STATE: torch.randn(batch, to, d, generator=g),
        keys.LANGUAGE: language / language.norm(dim=-1, keepdim=True),
    }
    if with_action:
        out[keys.ACTION] = torch.randn(batch, config.horizon, d, generator=g)
    return out


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Tiny models on two shared cores: a two-thread OpenMP team stalls whenever another
    process holds a core (measured on a loaded machine: test_sampling.py 32 s with two
    threads, 2 s with one), so the policy tests run single-threaded."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def make_config():
    """``make_config(**changes)``: the tiny config with some fields replaced."""
    return tiny_config


@pytest.fixture
def make_batch():
    """``make_batch(config, batch, seed=0, with_action=True)``: random tensors of every key."""
    return random_batch


@pytest.fixture(scope="session")
def language_cache_path(tmp_path_factory):
    return tmp_path_factory.mktemp("language") / "embeddings.json"


@pytest.fixture(scope="session")
def language(language_cache_path) -> LanguageEmbedder:
    """The real sentence encoder, loaded once (~5 s) for every test that needs it."""
    embedder = LanguageEmbedder(cache_path=language_cache_path)
    embedder.load()
    return embedder
