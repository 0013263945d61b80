"""Min-max normalisation to [-1, 1], with the statistics stored as module buffers.

Buffers travel with ``state_dict()``, so the statistics a policy was trained
with are saved in the same ``model.safetensors`` as its weights and cannot
drift apart from them. Images are not normalised here: the RGB encoder takes
them in [0, 1].
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

RANGE_EPS = 1e-4
"""A dimension whose max - min is below this is constant in the data: it maps
to ``x - min - 1`` (so -1 at its value) instead of dividing by ~0."""

class MinMaxNormalizer(nn.Module):
    """Per-feature affine map of named quantities, last axis = feature."""

    def __init__(self, dims: Mapping[str, int]):
        super().__init__()
        self.keys = tuple(dims)
        for key, dim in dims.items():
            self.register_buffer(self._name(key, "min"), -torch.ones(dim))
            self.register_buffer(self._name(key, "max"), torch.ones(dim))

    @staticmethod
    def _name(key: str, which: str) -> str:
        return f"{key.replace('.', '__')}__{which}"

    def set_stats(self, stats: Mapping[str, Mapping[str, torch.Tensor]]) -> None:
        """Adopt ``{key: {"min": (D,), "max": (D,)}}`` for every key."""
        missing = set(self.keys) - set(stats)
        if missing:
            raise ValueError(f"normaliser statistics missing for {sorted(missing)}")
        for key in self.keys:
            lo = torch.as_tensor(stats[key]["min"], dtype=torch.float32)
            hi = torch.as_tensor(stats[key]["max"], dtype=torch.float32)
            buf_lo = getattr(self, self._name(key, "min"))
            if lo.shape != buf_lo.shape or hi.shape != buf_lo.shape:
                raise ValueError(f"{key}: statistics of shape {tuple(lo.shape)} / "
                                 f"{tuple(hi.shape)}, expected {tuple(buf_lo.shape)}")
            if not (torch.isfinite(lo).all() and torch.isfinite(hi).all() and (hi >= lo).all()):
                raise ValueError(f"{key}: statistics must be finite with max >= min")
            buf_lo.copy_(lo)
            getattr(self, self._name(key, "max")).copy_(hi)

    def stats(self) -> dict[str, dict[str, torch.Tensor]]:
        return {key: {"min": getattr(self, self._name(key, "min")).clone(),
                      "max": getattr(self, self._name(key, "max")).clone()}
                for key in self.keys}

    def _scale_offset(self, key: str) -> tuple[torch.Tensor, torch.Tensor]:
        lo = getattr(self, self._name(key, "min"))
        span = getattr(self, self._name(key, "max")) - lo
        span = torch.where(span < RANGE_EPS, torch.full_like(span, 2.0), span)
        return 2.0 / span, lo

    def normalize(self, key: str, x: torch.Tensor) -> torch.Tensor:
        scale, lo = self._scale_offset(key)
        return (x - lo) * scale - 1.0

    def unnormalize(self, key: str, x: torch.Tensor) -> torch.Tensor:
        scale, lo = self._scale_offset(key)
        return (x + 1.0) / scale + lo


def min_max_stats(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-feature min and max over every leading axis of ``x`` (..., D)."""
    flat = x.reshape(-1, x.shape[-1]).float()
    return {"min": flat.min(dim=0).values, "max": flat.max(dim=0).values}
