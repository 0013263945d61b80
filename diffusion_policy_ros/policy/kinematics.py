"""Forward kinematics of a serial arm in torch: joint angles -> tool centre point.

The policy uses it to express where the grounded target is relative to the tool
(``policy/tool_target.py``). The chain's constants are buffers, so a checkpoint
carries the kinematics of the arm it was trained for; they come from the arm
model (``sim.ik.tool_chain``) when training starts, like the normaliser's
statistics come from the data.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

CHAIN_KEYS = ("origin_rotation", "origin_position_m", "joint_position_m", "joint_axis",
              "tool_rotation", "tool_position_m")


def axis_angle_rotation(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rodrigues: unit ``axis`` (3,), ``angle`` (...) rad -> (..., 3, 3)."""
    x, y, z = axis
    zero = torch.zeros((), dtype=axis.dtype, device=axis.device)
    skew = torch.stack([torch.stack([zero, -z, y]), torch.stack([z, zero, -x]),
                        torch.stack([-y, x, zero])])
    s, c = torch.sin(angle)[..., None, None], torch.cos(angle)[..., None, None]
    eye = torch.eye(3, dtype=axis.dtype, device=axis.device)
    return eye + s * skew + (1.0 - c) * (skew @ skew)


class SerialChainKinematics(nn.Module):
    """(..., J) joint angles (rad) -> (..., 3) tool position (m) in the chain's root frame."""

    def __init__(self, n_joints: int):
        super().__init__()
        self.n_joints = n_joints
        self.register_buffer("origin_rotation", torch.zeros(n_joints, 3, 3))
        self.register_buffer("origin_position_m", torch.zeros(n_joints, 3))
        self.register_buffer("joint_position_m", torch.zeros(n_joints, 3))
        self.register_buffer("joint_axis", torch.zeros(n_joints, 3))
        self.register_buffer("tool_rotation", torch.zeros(3, 3))
        self.register_buffer("tool_position_m", torch.zeros(3))

    @property
    def is_set(self) -> bool:
        """False until ``set_chain`` (all constants zero: no arm has zero-length axes)."""
        return bool(self.joint_axis.abs().sum() > 0)

    def set_chain(self, chain: Mapping[str, np.ndarray]) -> None:
        missing = [k for k in CHAIN_KEYS if k not in chain]
        if missing:
            raise ValueError(f"kinematic chain lacks {missing}")
        for key in CHAIN_KEYS:
            value = torch.as_tensor(np.asarray(chain[key]), dtype=torch.float32)
            if value.shape != getattr(self, key).shape:
                raise ValueError(f"kinematic chain '{key}' has shape {tuple(value.shape)}, "
                                 f"expected {tuple(getattr(self, key).shape)}")
            getattr(self, key).copy_(value)

    def forward(self, q_rad: torch.Tensor) -> torch.Tensor:
        if not self.is_set:
            raise RuntimeError("the policy's arm kinematics were never set (set_chain)")
        q = q_rad[..., :self.n_joints].float()
        rotation = torch.eye(3, device=q.device).expand(*q.shape[:-1], 3, 3)
        position = torch.zeros(*q.shape[:-1], 3, device=q.device)
        for j in range(self.n_joints):
            position = position + rotation @ self.origin_position_m[j]
            rotation = rotation @ self.origin_rotation[j]
            hinge = axis_angle_rotation(self.joint_axis[j], q[..., j])
            anchor = self.joint_position_m[j]
            position = position + (rotation @ (anchor - hinge @ anchor)[..., None])[..., 0]
            rotation = rotation @ hinge
        return position + rotation @ self.tool_position_m
