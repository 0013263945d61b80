"""Low-pass projection of a sampled action chunk along its horizon.

The demonstrations' joint paths over one chunk are smooth, while a few-step sampler
(a consistency student, DDIM with few steps) leaves high-frequency jitter in each
sampled path. The tracker follows that jitter, the arm shakes, and the grasp misses.
Projecting each arm joint's path onto its first cosine (DCT-II) terms removes the
jitter and keeps what the demonstrations contain (``dpr``'s docs/explanation/distillation.md
measures
both). The constant term is among those kept, so the projection commutes with the
normaliser's per-column affine map and with relative actions. The gripper column is
left as sampled: its open/close is a step.
"""

from __future__ import annotations

import numpy as np
import torch


def lowpass_basis(horizon: int, terms: int) -> torch.Tensor:
    """(horizon, terms) orthonormal columns cos(pi * (n + 1/2) * k / horizon), k < terms."""
    if not 1 <= terms <= horizon:
        raise ValueError(f"terms must be in 1..{horizon}, got {terms}")
    n = np.arange(horizon) + 0.5
    basis = np.cos(np.pi * np.outer(n, np.arange(terms)) / horizon)
    basis /= np.linalg.norm(basis, axis=0)
    return torch.from_numpy(basis).float()


def lowpass_projection(horizon: int, terms: int) -> torch.Tensor:
    """(horizon, horizon) orthogonal projection onto the ``lowpass_basis``."""
    basis = lowpass_basis(horizon, terms)
    return basis @ basis.T


def smooth_arm_paths(chunk: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """(..., T, D) chunk with every column but the last (the gripper) projected."""
    arm = torch.einsum("st,...td->...sd", projection.to(chunk.dtype), chunk[..., :-1])
    return torch.cat([arm, chunk[..., -1:]], dim=-1)
