"""Diffusion-step embedding shared by both denoisers."""

from __future__ import annotations

import math

import torch
from torch import nn

from diffusion_policy_ros.policy.activations import Mish


class SinusoidalEmbedding(nn.Module):
    """Transformer-style sin/cos features of a scalar step index (B,) -> (B, dim)."""

    freqs: torch.Tensor  # a buffer

    def __init__(self, dim: int):
        super().__init__()
        half = dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half) / max(1, half - 1))
        self.register_buffer("freqs", freqs, persistent=False)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        angles = t.float()[:, None] * self.freqs[None, :]
        return torch.cat([angles.sin(), angles.cos()], dim=-1)


class TimestepEncoder(nn.Sequential):
    """Sinusoidal features -> 2-layer MLP (Chi et al.'s diffusion_step_encoder)."""

    def __init__(self, dim: int, out_dim: int | None = None):
        super().__init__(SinusoidalEmbedding(dim), nn.Linear(2 * (dim // 2), 4 * dim), Mish(),
                         nn.Linear(4 * dim, out_dim or dim))


def timesteps_for(t: torch.Tensor | int, batch: int, device: torch.device) -> torch.Tensor:
    """A diffusion step given as int, 0-d or (B,) tensor, as a (B,) tensor on ``device``."""
    t = torch.as_tensor(t, device=device)
    return t.expand(batch) if t.dim() == 0 else t
