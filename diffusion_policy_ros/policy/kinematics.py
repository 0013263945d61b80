"""Forward kinematics of a serial arm in torch: joint angles -> tool centre point.

The policy uses it to express where the grounded target is relative to the tool
(``policy/tool_target.py``). The chain's constants are buffers, so a checkpoint
carries the kinematics of the arm it was trained for; they come from the arm
model (``sim.ik.tool_chain``) when training starts, like the normaliser's
statistics come from the data. On the robot the chain comes from the URDF
(``urdf_chain``), so the nodes need neither MuJoCo nor the simulator.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import transforms3d
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

    # Buffers.
    origin_rotation: torch.Tensor
    origin_position_m: torch.Tensor
    joint_position_m: torch.Tensor
    joint_axis: torch.Tensor
    tool_rotation: torch.Tensor
    tool_position_m: torch.Tensor

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
            value = torch.as_tensor(np.asarray(chain[key]), dtype=getattr(self, key).dtype)
            if value.shape != getattr(self, key).shape:
                raise ValueError(f"kinematic chain '{key}' has shape {tuple(value.shape)}, "
                                 f"expected {tuple(getattr(self, key).shape)}")
            getattr(self, key).copy_(value)

    def pose(self, q_rad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., J) joint angles -> tool position (..., 3) and rotation (..., 3, 3).

        Computed in the buffers' dtype: ``.double()`` gives float64 for markers and
        checks, the float32 default is what the policy trains with.
        """
        if not self.is_set:
            raise RuntimeError("the policy's arm kinematics were never set (set_chain)")
        dtype, device = self.joint_axis.dtype, self.joint_axis.device
        q = q_rad[..., :self.n_joints].to(dtype)
        rotation = torch.eye(3, dtype=dtype, device=device).expand(*q.shape[:-1], 3, 3)
        position = torch.zeros(*q.shape[:-1], 3, dtype=dtype, device=device)
        for j in range(self.n_joints):
            position = position + rotation @ self.origin_position_m[j]
            rotation = rotation @ self.origin_rotation[j]
            hinge = axis_angle_rotation(self.joint_axis[j], q[..., j])
            anchor = self.joint_position_m[j]
            position = position + (rotation @ (anchor - hinge @ anchor)[..., None])[..., 0]
            rotation = rotation @ hinge
        return position + rotation @ self.tool_position_m, rotation @ self.tool_rotation

    def forward(self, q_rad: torch.Tensor) -> torch.Tensor:
        return self.pose(q_rad)[0]

    @torch.no_grad()
    def tool_positions(self, q_rad: np.ndarray) -> np.ndarray:
        """``forward`` with numpy in and out, for callers that hold no tensors (markers)."""
        return self.pose(torch.as_tensor(np.asarray(q_rad)))[0].cpu().numpy()

    def pose_error(self, q_rad: torch.Tensor, position_m: torch.Tensor,
                   rotation: torch.Tensor) -> torch.Tensor:
        """(..., 6): the tool's position at ``q_rad`` minus ``position_m`` (m), then its
        rotation away from ``rotation`` (3, 3) as a small-angle rotation vector weighted as
        0.1 m per rad: the error ``vertical_lift_path`` drives to zero."""
        p, r = self.pose(q_rad)
        rot = rotation.transpose(-1, -2) @ r
        w = 0.5 * torch.stack([rot[..., 2, 1] - rot[..., 1, 2],
                               rot[..., 0, 2] - rot[..., 2, 0],
                               rot[..., 1, 0] - rot[..., 0, 1]], dim=-1)
        return torch.cat([p - position_m, 0.1 * w], dim=-1)

    @torch.no_grad()
    def vertical_lift_path(self, q0_rad: np.ndarray, rise_m: np.ndarray,
                           max_iterations: int = 8, tolerance: float = 1e-6,
                           damping: float = 1e-4) -> tuple[np.ndarray, float]:
        """Joint angles (len(rise_m), J) that raise the tool by ``rise_m`` (m, each >= 0)
        above where ``q0_rad`` holds it, orientation unchanged; and the largest pose error
        of the path (m for position; rad for orientation, weighted as 0.1 m per rad).

        Damped least squares for all points at once, each from ``q0_rad``, until every
        pose error is within ``tolerance`` (``max_iterations`` at most): one batched
        ``pose`` call per iteration gives every point's error and its Jacobian by central
        differences. It runs on the policy's worker thread when a lift starts, delaying
        that chunk, where a point-by-point solve takes about five ``pose`` calls per
        point (``dpr bench lift-path`` times both)."""
        n = self.n_joints
        dtype = self.joint_axis.dtype
        q0 = torch.as_tensor(np.asarray(q0_rad, dtype=np.float64)[:n], dtype=dtype)
        p0, r0 = self.pose(q0)
        step = 1e-6 if dtype == torch.float64 else 1e-3
        # Per point: the point itself, then +step and -step on each joint.
        probes = torch.cat([torch.zeros(1, n, dtype=dtype), torch.eye(n, dtype=dtype),
                            -torch.eye(n, dtype=dtype)]) * step
        rise = torch.as_tensor(np.asarray(rise_m, dtype=np.float64), dtype=dtype)
        up = torch.tensor([0.0, 0.0, 1.0], dtype=dtype)
        targets = (p0 + rise[:, None] * up)[:, None, :]  # (P, 1, 3)
        regulariser = damping * torch.eye(6, dtype=dtype)
        q = q0.expand(len(rise), n).clone()
        for iteration in range(max_iterations + 1):
            errors = self.pose_error(q[:, None, :] + probes, targets, r0)  # (P, 2J + 1, 6)
            worst = float(errors[:, 0].abs().max()) if len(rise) else 0.0
            if worst <= tolerance or iteration == max_iterations:
                break
            jacobian = ((errors[:, 1:n + 1] - errors[:, n + 1:]) / (2 * step)).transpose(-1, -2)
            lhs = jacobian @ jacobian.transpose(-1, -2) + regulariser  # (P, 6, 6)
            correction = torch.linalg.solve(lhs, errors[:, 0, :, None])
            q = q - (jacobian.transpose(-1, -2) @ correction)[..., 0]
        return q.cpu().numpy().astype(np.float64), worst


def _floats(text: str | None) -> np.ndarray:
    """A URDF triple; absent means zeros, as the URDF spec has it for origins."""
    return np.array([float(v) for v in text.split()]) if text else np.zeros(3)


def _origin(joint: ET.Element) -> np.ndarray:
    """4x4 transform of a URDF joint's ``<origin xyz rpy>`` (rpy: fixed-axis x, y, z)."""
    transform = np.eye(4)
    origin = joint.find("origin")
    if origin is not None:
        transform[:3, :3] = transforms3d.euler.euler2mat(*_floats(origin.get("rpy")), "sxyz")
        transform[:3, 3] = _floats(origin.get("xyz"))
    return transform


def _link_of(joint: ET.Element, end: str) -> str | None:
    """The ``link`` of a URDF joint's ``<parent>`` or ``<child>``."""
    element = joint.find(end)
    assert element is not None, f"URDF joint '{joint.get('name')}' has no <{end}>"
    return element.get("link")


def urdf_chain(urdf: str | Path, joint_names: Sequence[str],
               tip_link: str) -> dict[str, np.ndarray]:
    """The serial chain root link -> ``joint_names`` (revolute, in order) -> ``tip_link``
    of a URDF file, as the arrays ``SerialChainKinematics.set_chain`` takes.

    Fixed joints on the way fold into the neighbouring constants; any other movable
    joint between the root and the tip is an error, since the chain could not hold it.
    """
    root = ET.parse(urdf).getroot()
    by_child = {_link_of(j, "child"): j for j in root.findall("joint")}
    if tip_link not in {link.get("name") for link in root.findall("link")}:
        raise ValueError(f"the URDF has no link '{tip_link}'")
    path: list[ET.Element] = []
    link: str | None = tip_link
    while link in by_child:
        path.append(by_child[link])
        link = _link_of(by_child[link], "parent")
    movable = [j.get("name") for j in reversed(path) if j.get("type") != "fixed"]
    if movable != list(joint_names):
        raise ValueError(f"the URDF's movable joints from '{link}' to '{tip_link}' are "
                         f"{movable}, expected {list(joint_names)}")
    rotations, positions, axes = [], [], []
    transform = np.eye(4)
    for joint in reversed(path):
        transform = transform @ _origin(joint)
        kind = joint.get("type")
        if kind == "fixed":
            continue
        if kind not in ("revolute", "continuous"):
            raise ValueError(f"joint '{joint.get('name')}' is {kind}, not a hinge")
        axis_elem = joint.find("axis")
        axis = _floats(axis_elem.get("xyz") if axis_elem is not None else "1 0 0")
        rotations.append(transform[:3, :3])
        positions.append(transform[:3, 3])
        axes.append(axis / np.linalg.norm(axis))
        transform = np.eye(4)
    n = len(axes)
    return {"origin_rotation": np.array(rotations).reshape(n, 3, 3),
            "origin_position_m": np.array(positions).reshape(n, 3),
            "joint_position_m": np.zeros((n, 3)), "joint_axis": np.array(axes).reshape(n, 3),
            "tool_rotation": transform[:3, :3].copy(), "tool_position_m": transform[:3, 3].copy()}


def urdf_kinematics(urdf: str | Path, joint_names: Sequence[str],
                    tip_link: str) -> SerialChainKinematics:
    """Float64 ``SerialChainKinematics`` of a URDF chain (the robot-side forward kinematics)."""
    kinematics = SerialChainKinematics(len(joint_names)).double()
    kinematics.set_chain(urdf_chain(urdf, joint_names, tip_link))
    return kinematics
