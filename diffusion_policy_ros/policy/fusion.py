"""Mid-level cross-modal fusion: language and proprioception query the scene tokens.

Each modality is encoded on its own, then two query tokens (the projected
instruction embedding and the proprioception token) cross-attend to the image
tokens (CNN feature-map cells of every observation frame) and the point tokens
(global + Voronoi-cell PointNet features of every frame). The queries also
self-attend, so what the instruction picks out of the scene reaches the arm
state and back. Scene tokens are not updated (no scene self-attention), which
keeps the cost at (2 queries x scene tokens) per layer; the scene tokens are
layer-normalised once, since pre-norm decoder layers normalise only the
queries, and image and point projections differ in scale. The two query outputs,
concatenated and projected, are the condition vector of the denoiser.
"""

from __future__ import annotations

import torch
from torch import nn

from diffusion_policy_ros.policy.activations import Mish


class CrossModalFusion(nn.Module):
    """Scene tokens + language embedding + proprio token -> (B, cond_dim)."""

    def __init__(self, *, n_obs_steps: int, image_dim: int, image_cells: int, point_dim: int,
                 language_dim: int, dim: int, layers: int, heads: int, cond_dim: int):
        super().__init__()
        self.image_proj = nn.Linear(image_dim, dim)
        self.image_pos = nn.Parameter(0.02 * torch.randn(n_obs_steps, image_cells, dim))
        self.point_proj = nn.Linear(point_dim, dim)
        self.point_frame = nn.Parameter(0.02 * torch.randn(n_obs_steps, 1, dim))
        self.point_global = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.centre_embed = nn.Sequential(nn.Linear(3, dim), Mish(), nn.Linear(dim, dim))
        self.language_proj = nn.Linear(language_dim, dim)
        self.scene_norm = nn.LayerNorm(dim)
        self.query_type = nn.Parameter(0.02 * torch.randn(2, dim))
        self.layers = nn.ModuleList(
            nn.TransformerDecoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(2 * dim, cond_dim)

    def scene_tokens(self, image_tokens: torch.Tensor, point_tokens: torch.Tensor,
                     centres: torch.Tensor) -> torch.Tensor:
        """(B, To, cells, Ci), (B, To, 1 + K, Cp), (B, To, K, 3) -> (B, S, dim)."""
        b, to = image_tokens.shape[:2]
        image = self.image_proj(image_tokens) + self.image_pos
        points = self.point_proj(point_tokens) + self.point_frame[None]
        where = torch.cat([self.point_global.expand(b, to, 1, -1), self.centre_embed(centres)],
                          dim=2)
        scene = torch.cat([image.flatten(1, 2), (points + where).flatten(1, 2)], dim=1)
        return self.scene_norm(scene)

    def forward(self, image_tokens: torch.Tensor, point_tokens: torch.Tensor,
                centres: torch.Tensor, language: torch.Tensor,
                proprio: torch.Tensor) -> torch.Tensor:
        scene = self.scene_tokens(image_tokens, point_tokens, centres)
        queries = torch.stack([self.language_proj(language), proprio], dim=1) + self.query_type
        for layer in self.layers:
            queries = layer(queries, scene)
        return self.out(self.norm(queries).flatten(1))
