"""Diffusion Transformer denoiser with adaLN-Zero conditioning (DiT, as used by LightDP).

Each action step is a token. The sum of the diffusion-step embedding and the
projected observation condition drives, per block, a shift / scale / gate for
the attention and the MLP branch (adaLN-Zero: the modulation is zero-
initialised, so every block starts as the identity). Identity-initialised
residual blocks are what makes layer pruning recoverable: LightDP removes
whole blocks and retrains.

Blocks are addressable by their original index: ``blocks`` is a ModuleDict
keyed ``"0"``..``"L-1"`` holding only ``keep_layers``, so the state dict of a
pruned model is a subset of the full model's, key for key.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from diffusion_policy_ros.policy.embeddings import TimestepEncoder, timesteps_for


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1.0 + scale[:, None]) + shift[:, None]


class DiTBlock(nn.Module):
    """Pre-norm self-attention + MLP, each modulated and gated by the condition."""

    def __init__(self, width: int, heads: int, mlp_ratio: float):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        hidden = int(width * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(hidden, width))
        self.modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 6 * width))
        modulation = self.modulation[1]
        assert isinstance(modulation, nn.Linear)
        nn.init.zeros_(modulation.weight)
        nn.init.zeros_(modulation.bias)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, w))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.modulation(c).chunk(6, dim=-1)
        x = x + gate1[:, None] * self.attention(_modulate(self.norm1(x), shift1, scale1))
        return x + gate2[:, None] * self.mlp(_modulate(self.norm2(x), shift2, scale2))


class DiffusionTransformer(nn.Module):
    """``forward(sample (B, T, Da), timestep (B,), cond (B, C)) -> (B, T, Da)``; a
    condition of batch 1 with a scalar timestep is shared by the whole batch (its
    modulation computed once)."""

    def __init__(self, action_dim: int, cond_dim: int, horizon: int, *, width: int,
                 heads: int, mlp_ratio: float, layers: list[int], timestep_dim: int):
        super().__init__()
        self.input_proj = nn.Linear(action_dim, width)
        self.pos = nn.Parameter(0.02 * torch.randn(1, horizon, width))
        self.timestep_encoder = TimestepEncoder(timestep_dim, width)
        self.cond_proj = nn.Linear(cond_dim, width)
        self.blocks = nn.ModuleDict({str(i): DiTBlock(width, heads, mlp_ratio) for i in layers})
        self.final_norm = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.final_modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 2 * width))
        self.output_proj = nn.Linear(width, action_dim)
        final_modulation = self.final_modulation[1]
        assert isinstance(final_modulation, nn.Linear)
        for layer in (final_modulation, self.output_proj):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor | int,
                cond: torch.Tensor) -> torch.Tensor:
        t = timesteps_for(timestep, cond.shape[0], sample.device)
        c = self.timestep_encoder(t) + self.cond_proj(cond)
        x = self.input_proj(sample) + self.pos
        for block in self.blocks.values():
            x = block(x, c)
        shift, scale = self.final_modulation(c).chunk(2, dim=-1)
        return self.output_proj(_modulate(self.final_norm(x), shift, scale))
