"""1-D temporal U-Net denoiser with FiLM conditioning (Chi et al., Diffusion Policy).

The action chunk (B, T, Da) is treated as a Da-channel sequence of length T.
Every residual block is FiLM-conditioned: a linear map of [diffusion-step
embedding, observation condition] gives a per-channel scale and shift applied
after the first convolution. The scale enters as ``1 + scale`` so an untrained
block starts close to unconditioned (Chi et al. use ``scale`` directly).
Every level above the bottleneck sends a skip to its mirror on the way up,
full resolution included (Chi et al.'s ConditionalUnet1D computes the full-resolution skip
but never uses it, so fine temporal detail, which epsilon prediction needs,
must squeeze through the half-resolution path: on a few memorised chunks a tiny
U-Net of that shape cut the loss far less than this one did in as many steps;
figures in docs/explanation/benchmarks.md, "Measurements behind the code's design").
Upsampling is nearest-neighbour x2 followed by a convolution.

Convolutions run as unfold + matmul (``TemporalConv1d``): at batch 1 and
sequence lengths 4-16, torch 2.13's CPU ``conv1d`` takes its slow im2col path,
measured several times slower than the same product as one ``linear`` on the
deep levels, the bulk of a step (figures in docs/explanation/benchmarks.md, "Measurements
behind the code's design").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from diffusion_policy_ros.policy.activations import Mish
from diffusion_policy_ros.policy.embeddings import TimestepEncoder, timesteps_for


class TemporalConv1d(nn.Conv1d):
    """``nn.Conv1d`` (same parameters and state dict) computed as unfold + linear.

    Only what the U-Net uses: zero padding, no dilation, no groups.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export():  # a static graph runs its own Conv kernel
            return super().forward(x)
        assert not isinstance(self.padding, str)  # numeric padding only
        (k,), (stride,), (pad,) = self.kernel_size, self.stride, self.padding
        cols = F.pad(x, (pad, pad)).unfold(2, k, stride)
        cols = cols.transpose(1, 2).flatten(2)
        return F.linear(cols, self.weight.flatten(1), self.bias).transpose(1, 2)


class Conv1dBlock(nn.Sequential):
    """Conv1d -> GroupNorm -> Mish."""

    def __init__(self, cin: int, cout: int, kernel: int, groups: int):
        super().__init__(TemporalConv1d(cin, cout, kernel, padding=kernel // 2),
                         nn.GroupNorm(min(groups, cout), cout), Mish())


class FilmResidualBlock(nn.Module):
    """Two conv blocks; FiLM (per-channel scale and shift) between them."""

    def __init__(self, cin: int, cout: int, cond_dim: int, kernel: int, groups: int):
        super().__init__()
        self.conv1 = Conv1dBlock(cin, cout, kernel, groups)
        self.conv2 = Conv1dBlock(cout, cout, kernel, groups)
        self.film = nn.Sequential(Mish(), nn.Linear(cond_dim, 2 * cout))
        self.shortcut = TemporalConv1d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, shift = self.film(cond)[:, :, None].chunk(2, dim=1)
        y = self.conv1(x) * (1.0 + scale) + shift
        return self.conv2(y) + self.shortcut(x)


class Upsample1d(nn.Sequential):
    """x2 nearest-neighbour repeat -> conv k=3."""

    def __init__(self, channels: int):
        super().__init__(nn.Upsample(scale_factor=2, mode="nearest"),
                         TemporalConv1d(channels, channels, 3, padding=1))


class FilmUnet1d(nn.Module):
    """``forward(sample (B, T, Da), timestep (B,), cond (B, C)) -> (B, T, Da)``.

    A condition of batch 1 with a scalar timestep is shared by the whole batch: its
    FiLM scales and shifts are computed once (K samples of one observation).

    Channels ``base_dim * 2**level`` for ``levels`` resolutions; T must divide
    by ``2**(levels - 1)``.
    """

    def __init__(self, action_dim: int, cond_dim: int, *, base_dim: int, levels: int,
                 kernel_size: int, groups: int, timestep_dim: int):
        super().__init__()
        dims = [base_dim * 2 ** i for i in range(levels)]
        film_dim = timestep_dim + cond_dim
        self.timestep_encoder = TimestepEncoder(timestep_dim)

        def block(cin: int, cout: int) -> FilmResidualBlock:
            return FilmResidualBlock(cin, cout, film_dim, kernel_size, groups)

        self.down = nn.ModuleList()
        for i, (cin, cout) in enumerate(zip([action_dim, *dims[:-1]], dims, strict=True)):
            last = i == levels - 1
            self.down.append(nn.ModuleList([
                block(cin, cout), block(cout, cout),
                nn.Identity() if last else TemporalConv1d(cout, cout, 3, stride=2, padding=1)]))
        self.mid = nn.ModuleList([block(dims[-1], dims[-1]), block(dims[-1], dims[-1])])
        self.up = nn.ModuleList()
        for level in reversed(range(levels - 1)):
            cin, cout = dims[level + 1], dims[level]
            self.up.append(nn.ModuleList([Upsample1d(cin), block(cin + cout, cout),
                                          block(cout, cout)]))
        self.head = nn.Sequential(Conv1dBlock(base_dim, base_dim, kernel_size, groups),
                                  TemporalConv1d(base_dim, action_dim, 1))

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor | int,
                cond: torch.Tensor) -> torch.Tensor:
        t = timesteps_for(timestep, cond.shape[0], sample.device)
        film = torch.cat([self.timestep_encoder(t), cond], dim=-1)
        x = sample.transpose(1, 2)
        skips = []
        for level, stage in enumerate(self.down):
            assert isinstance(stage, nn.ModuleList)
            res1, res2, downsample = stage
            x = res2(res1(x, film), film)
            if level < len(self.up):
                skips.append(x)
            x = downsample(x)
        for res in self.mid:
            x = res(x, film)
        for stage in self.up:
            assert isinstance(stage, nn.ModuleList)
            upsample, res1, res2 = stage
            x = torch.cat([upsample(x), skips.pop()], dim=1)
            x = res2(res1(x, film), film)
        return self.head(x).transpose(1, 2)
