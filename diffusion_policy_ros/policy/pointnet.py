"""Point-cloud encoder: DP3-style PointNet (per-point MLP + LayerNorm + max-pool).

DP3 (Ze et al., 2024) showed that a small PointNet without T-nets, with
LayerNorm and a max-pool, beats heavier point backbones for diffusion
policies. Besides DP3's single global feature this encoder returns K local
tokens for the cross-modal attention: the cloud is split into the Voronoi
cells of K farthest-point-sampled centres and each cell's per-point features
are max-pooled, so the language query can single out the region that holds
the named object. Assigning points to centres needs one (N x K) distance
matrix instead of the kNN grouping of PointNet++, which keeps it cheap.

With ``condition_dim`` the per-point MLP is FiLM-conditioned on the
instruction embedding (scale and shift after every LayerNorm, as RT-1
conditions its image encoder on language), so the pooled features can already
be about the named object: late fusion alone (language attending to pooled
tokens) learnt to move the arm but not where to (closed loop, first chunk off
by 0.63 rad at the start of held-out demos after 2.4k steps). The FiLM layers
start at zero, i.e. as the unconditioned encoder.

Pooling is a large share of a training step on the CPU (batch 64 x To 2 =
128 clouds x 1024 points x 256 features, one core): the cell max-pool has
its own mask-based backward (``CellMax``, ~0.54 s forward + backward against
~0.76 s for torch's ``scatter_reduce(amax)`` backward), and the global token
is the max of the cell maxima instead of a second ``amax`` over all points
(~0.28 s forward + backward).
"""

from __future__ import annotations

import torch
from torch import nn


def farthest_point_indices(xyz: torch.Tensor, k: int) -> torch.Tensor:
    """(M, N, 3) -> (M, k) indices of farthest-point samples, starting at point 0."""
    m, n, _ = xyz.shape
    batch = torch.arange(m, device=xyz.device)
    chosen = torch.zeros(m, k, dtype=torch.long, device=xyz.device)
    nearest = torch.full((m, n), float("inf"), device=xyz.device)
    current = torch.zeros(m, dtype=torch.long, device=xyz.device)
    for i in range(k):
        chosen[:, i] = current
        d = (xyz - xyz[batch, current][:, None, :]).square().sum(-1)
        nearest = torch.minimum(nearest, d)
        current = nearest.argmax(dim=1)
    return chosen


def cell_max(features: torch.Tensor, cell: torch.Tensor, k: int) -> torch.Tensor:
    """(M, N, C) features >= 0, (M, N) cell index in [0, K) -> (M, K, C) per-cell max."""
    index = cell[..., None].expand_as(features)
    pooled = features.new_zeros(features.shape[0], k, features.shape[2])
    return pooled.scatter_reduce(1, index, features, "amax")


def masked_cell_max(features: torch.Tensor, cell: torch.Tensor, k: int) -> torch.Tensor:
    """``cell_max`` as K masked max-pools: the same numbers from ops every ONNX runtime
    has (the exporter's ScatterElements-max lowering does not load in ONNX Runtime)."""
    return torch.stack([torch.where((cell == i)[..., None], features, 0.0).amax(dim=1)
                        for i in range(k)], dim=1)


class CellMax(torch.autograd.Function):
    """(M, N, C) features, (M, N) cell index in [0, K) -> (M, K, C) per-cell max.

    Features must be >= 0 (after ReLU): pooling starts from zeros, so an empty
    cell (duplicate centres in a padded cloud) reads as zeros. The gradient
    goes to every point that attains its cell's max (ties only occur at 0,
    where the ReLU passes no gradient anyway).
    """

    @staticmethod
    def forward(ctx, features: torch.Tensor, cell: torch.Tensor, k: int) -> torch.Tensor:
        pooled = cell_max(features, cell, k)
        ctx.save_for_backward(features, cell[..., None].expand_as(features), pooled)
        return pooled

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        features, index, pooled = ctx.saved_tensors
        winners = features == pooled.gather(1, index)
        return grad.gather(1, index) * winners, None, None


class PointNetEncoder(nn.Module):
    """(M, N, 3) normalised xyz [+ (M, N, 3) rgb in [0, 1]] -> (M, 1 + K, dim) tokens.

    Token 0 is the global max-pool; tokens 1..K are the Voronoi cells, whose
    centres (M, K, 3) are returned for the fusion's positional embedding.
    """

    def __init__(self, feature_dim: int, num_tokens: int, use_rgb: bool,
                 condition_dim: int = 0):
        super().__init__()
        dims = [6 if use_rgb else 3, feature_dim // 4, feature_dim // 2, feature_dim]
        pairs = list(zip(dims[:-1], dims[1:], strict=True))
        layers: list[nn.Module] = []
        for cin, cout in pairs:
            layers += [nn.Linear(cin, cout), nn.LayerNorm(cout), nn.ReLU()]
        self.mlp = nn.Sequential(*layers)
        self.films = nn.ModuleList()
        if condition_dim:
            for _, cout in pairs:
                film = nn.Linear(condition_dim, 2 * cout)
                nn.init.zeros_(film.weight)
                nn.init.zeros_(film.bias)
                self.films.append(film)
        self.num_tokens = num_tokens
        self.use_rgb = use_rgb
        self.out_dim = feature_dim

    def forward(self, xyz: torch.Tensor, rgb: torch.Tensor | None = None,
                condition: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``condition``: (M, condition_dim), required when the encoder has FiLM layers."""
        if self.use_rgb:
            assert rgb is not None, "the encoder takes rgb"
            features = torch.cat([xyz, rgb], dim=-1)
        else:
            features = xyz
        if self.films and condition is None:
            raise ValueError("this PointNet is FiLM-conditioned: pass the condition")
        for i in range(0, len(self.mlp), 3):  # Linear, LayerNorm, [FiLM,] ReLU
            features = self.mlp[i + 1](self.mlp[i](features))
            if self.films:
                scale, shift = self.films[i // 3](condition)[:, None, :].chunk(2, dim=-1)
                features = features * (1.0 + scale) + shift
            features = self.mlp[i + 2](features)
        xyz = xyz.float()
        centres_idx = farthest_point_indices(xyz, self.num_tokens)
        batch = torch.arange(xyz.shape[0], device=xyz.device)[:, None]
        centres = xyz[batch, centres_idx]
        cell = torch.cdist(xyz, centres).argmin(dim=-1)
        # A static graph records the plain forward, not the autograd Function, and as K
        # masked max-pools: Inductor fuses them into one pass over the features, several
        # times faster than its scatter_reduce (dpr bench aot).
        local = (masked_cell_max(features, cell, self.num_tokens)
                 if torch.onnx.is_in_onnx_export() or torch.compiler.is_exporting()
                 else CellMax.apply(features, cell, self.num_tokens))
        # The cells partition the cloud, so the global max-pool is the max of the cell
        # maxima (and skips a second pass over N x C features and its backward).
        tokens = torch.cat([local.amax(dim=1, keepdim=True), local], dim=1)
        return tokens, centres
