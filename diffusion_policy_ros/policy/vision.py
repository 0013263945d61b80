"""RGB encoder: a small ResNet with GroupNorm, trained from scratch.

GroupNorm instead of BatchNorm because batch statistics are unreliable with
the small, highly correlated batches of imitation learning and with EMA
weights (Chi et al. replace BatchNorm for the same reason). Random-crop
augmentation (training only; a centre crop at inference) is the augmentation
Diffusion Policy found to matter most. The feature map is average-pooled to a
``grid x grid`` map whose cells are the image tokens the fusion attends to.
"""

from __future__ import annotations

import torch
from torch import nn


def _gn(channels: int, groups: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(groups, channels), channels)


def _binned_average(x: torch.Tensor, grid: int) -> torch.Tensor:
    """``adaptive_avg_pool2d`` written as slices: the ONNX exporter only lowers the
    adaptive pool when the grid divides the feature map; the bins are the same
    (floor(i * H / g) .. ceil((i + 1) * H / g))."""
    h, w = x.shape[-2:]
    rows = []
    for i in range(grid):
        r0, r1 = (i * h) // grid, -((-(i + 1) * h) // grid)
        cols = []
        for j in range(grid):
            c0, c1 = (j * w) // grid, -((-(j + 1) * w) // grid)
            cols.append(x[..., r0:r1, c0:c1].mean(dim=(-2, -1)))
        rows.append(torch.stack(cols, dim=-1))
    return torch.stack(rows, dim=-2)


class BasicBlock(nn.Module):
    """ResNet basic block, stride 2, with a projected shortcut."""

    def __init__(self, cin: int, cout: int, groups: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False)
        self.norm1 = _gn(cout, groups)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = _gn(cout, groups)
        self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=2, bias=False),
                                      _gn(cout, groups))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.norm1(self.conv1(x)))
        return torch.relu(self.norm2(self.conv2(y)) + self.shortcut(x))


def random_crop(images: torch.Tensor, crop_hw: tuple[int, int]) -> torch.Tensor:
    """An independent random ``crop_hw`` window of every image in (M, C, H, W)."""
    m, _, h, w = images.shape
    ch, cw = crop_hw
    dev = images.device
    y0 = torch.randint(0, h - ch + 1, (m,), device=dev)
    x0 = torch.randint(0, w - cw + 1, (m,), device=dev)
    rows = (y0[:, None] + torch.arange(ch, device=dev))[:, :, None]
    cols = (x0[:, None] + torch.arange(cw, device=dev))[:, None, :]
    batch = torch.arange(m, device=dev)[:, None, None]
    # contiguous(): the gather leaves a channels-last stride that crashed oneDNN
    # conv backward for 8-channel stems (heap corruption, torch 2.13 CPU).
    return images[batch, :, rows, cols].permute(0, 3, 1, 2).contiguous()


def center_crop(images: torch.Tensor, crop_hw: tuple[int, int]) -> torch.Tensor:
    h, w = images.shape[-2:]
    y0, x0 = (h - crop_hw[0]) // 2, (w - crop_hw[1]) // 2
    return images[..., y0: y0 + crop_hw[0], x0: x0 + crop_hw[1]]


class RgbEncoder(nn.Module):
    """(M, 3, H, W) in [0, 1] -> (M, grid*grid, out_channels) feature-map tokens."""

    def __init__(self, crop_hw: tuple[int, int], base_channels: int, stages: int,
                 token_grid: int, groups: int):
        super().__init__()
        self.crop_hw = crop_hw
        self.stem = nn.Sequential(
            nn.Conv2d(3, base_channels, 3, stride=2, padding=1, bias=False),
            _gn(base_channels, groups), nn.ReLU())
        widths = [base_channels * 2 ** i for i in range(stages)]
        self.stages = nn.Sequential(*(BasicBlock(cin, cout, groups) for cin, cout in
                                      zip([base_channels, *widths[:-1]], widths, strict=True)))
        self.pool = nn.AdaptiveAvgPool2d(token_grid)
        self.out_channels = widths[-1]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.training:
            images = random_crop(images, self.crop_hw)
        else:
            images = center_crop(images, self.crop_hw)
        # Inputs centred on zero; GroupNorm takes care of the scale.
        features = self.stages(self.stem(images - 0.5))
        if torch.onnx.is_in_onnx_export():
            grid = self.pool.output_size
            assert isinstance(grid, int)  # token_grid
            features = _binned_average(features, grid)
        else:
            features = self.pool(features)
        return features.flatten(2).transpose(1, 2)
