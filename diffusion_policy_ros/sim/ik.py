"""Inverse kinematics of the ``tcp`` site: damped least squares on ``mj_jacSite``.

The scripted expert plans in joint space (that is what an action chunk holds)
but its goals are tool poses (above the object, at the grasp, lifted), so it
needs IK. Damped least squares (``dq = J^T (J J^T + lambda I)^-1 e``) stays
well behaved near singularities and, warm-started from the current joints,
converges to the nearby solution of the same arm configuration (elbow up,
wrist as it is) instead of jumping to another branch, which keeps the
joint-space motion between goals short. Every solve works on a private
``MjData``: the simulation state is never touched.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES, TCP_SITE_NAME, load_model


@dataclasses.dataclass(frozen=True)
class IkSolution:
    """Joints found for a target pose and how far from the target they leave the tool."""

    q_rad: np.ndarray
    position_error_m: float
    rotation_error_rad: float
    iterations: int
    converged: bool


def rotation_error_vector(rotation, target_rotation) -> np.ndarray:
    """World-frame rotation vector (rad) that turns ``rotation`` into ``target_rotation``.

    Exact axis-angle of ``target @ rotation.T`` (not the small-angle cross-product
    form), so the step size stays right for large orientation errors.
    """
    delta = np.asarray(target_rotation) @ np.asarray(rotation).T
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, delta.reshape(-1))
    vec = np.empty(3)
    mujoco.mju_quat2Vel(vec, quat, 1.0)
    return vec


class TcpIk:
    """Position + orientation IK of the tool centre point for ``joint_1``..``joint_6``."""

    def __init__(self, model: mujoco.MjModel, damping: float = 1e-4, max_step_rad: float = 0.3,
                 position_tolerance_m: float = 1e-5, rotation_tolerance_rad: float = 1e-4,
                 max_iterations: int = 200):
        self.model = model
        self._data = mujoco.MjData(model)
        self._site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, TCP_SITE_NAME)
        joints = [model.joint(n) for n in ARM_JOINT_NAMES]
        self._qadr = np.array([j.qposadr[0] for j in joints])
        self._dofs = np.array([j.dofadr[0] for j in joints])
        #: (6, 2) joint position limits (rad); solutions are kept inside them.
        self.limits_rad = np.array([j.range for j in joints])
        self.damping = damping
        self.max_step_rad = max_step_rad
        self.position_tolerance_m = position_tolerance_m
        self.rotation_tolerance_rad = rotation_tolerance_rad
        self.max_iterations = max_iterations
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))

    def forward(self, q_rad) -> tuple[np.ndarray, np.ndarray]:
        """(position (3,) m, rotation (3, 3)) of the tcp for arm joints ``q_rad``."""
        d = self._data
        d.qpos[self._qadr] = q_rad
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_comPos(self.model, d)  # cdof, which mj_jacSite reads
        return d.site_xpos[self._site].copy(), d.site_xmat[self._site].reshape(3, 3).copy()

    def solve(self, q_start_rad, target_position_m, target_rotation) -> IkSolution:
        """Joints that put the tcp at the target pose, iterated from ``q_start_rad``."""
        target_p = np.asarray(target_position_m, dtype=np.float64)
        target_r = np.asarray(target_rotation, dtype=np.float64)
        q = np.clip(np.asarray(q_start_rad, dtype=np.float64), *self.limits_rad.T)
        eye = self.damping * np.eye(6)
        it = 0
        while True:
            pos, rot = self.forward(q)
            dp = target_p - pos
            dr = rotation_error_vector(rot, target_r)
            pos_err, rot_err = float(np.linalg.norm(dp)), float(np.linalg.norm(dr))
            converged = (pos_err <= self.position_tolerance_m
                         and rot_err <= self.rotation_tolerance_rad)
            if converged or it == self.max_iterations:
                return IkSolution(q, pos_err, rot_err, it, converged)
            mujoco.mj_jacSite(self.model, self._data, self._jacp, self._jacr, self._site)
            jac = np.vstack([self._jacp[:, self._dofs], self._jacr[:, self._dofs]])
            dq = jac.T @ np.linalg.solve(jac @ jac.T + eye, np.concatenate([dp, dr]))
            largest = np.abs(dq).max()
            if largest > self.max_step_rad:
                dq *= self.max_step_rad / largest
            q = np.clip(q + dq, *self.limits_rad.T)
            it += 1


def _body_transform(model: mujoco.MjModel, body: int) -> tuple[np.ndarray, np.ndarray]:
    rotation = np.empty(9)
    mujoco.mju_quat2Mat(rotation, model.body_quat[body])
    return rotation.reshape(3, 3), model.body_pos[body].copy()


def _path_transform(model: mujoco.MjModel, body: int,
                    ancestor: int) -> tuple[np.ndarray, np.ndarray]:
    """Fixed transform from ``ancestor``'s frame to ``body``'s (its own joints excluded)."""
    rotation, position = np.eye(3), np.zeros(3)
    while body != ancestor:
        r, p = _body_transform(model, body)
        rotation, position = r @ rotation, r @ position + p
        body = int(model.body_parentid[body])
        if body == 0 and ancestor != 0:
            raise ValueError("the kinematic chain is not a single path from the world")
    return rotation, position


def tool_chain(model: mujoco.MjModel, joint_names=ARM_JOINT_NAMES,
               site: str = TCP_SITE_NAME) -> dict[str, np.ndarray]:
    """The serial chain world -> ``joint_names`` (hinges, in order) -> ``site`` as arrays.

    For ``policy.kinematics.SerialChainKinematics``: ``origin_rotation`` (J, 3, 3) and
    ``origin_position_m`` (J, 3) take the previous joint's body frame (the world for the
    first) to this joint's body frame; ``joint_position_m`` / ``joint_axis`` (J, 3) place
    the hinge in that frame; ``tool_rotation`` / ``tool_position_m`` take the last joint's
    body frame to the site. Same forward kinematics as ``TcpIk.forward``.
    """
    rotations, positions, anchors, axes = [], [], [], []
    parent = 0
    for name in joint_names:
        joint = model.joint(name)
        if joint.type[0] != mujoco.mjtJoint.mjJNT_HINGE:
            raise ValueError(f"joint '{name}' is not a hinge")
        body = int(joint.bodyid[0])
        r, p = _path_transform(model, body, parent)
        rotations.append(r)
        positions.append(p)
        anchors.append(joint.pos.copy())
        axes.append(joint.axis / np.linalg.norm(joint.axis))
        parent = body
    site_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site)
    if site_id < 0:
        raise ValueError(f"the model has no site '{site}'")
    r, p = _path_transform(model, int(model.site_bodyid[site_id]), parent)
    site_rotation = np.empty(9)
    mujoco.mju_quat2Mat(site_rotation, model.site_quat[site_id])
    tool_rotation = r @ site_rotation.reshape(3, 3)
    tool_position = r @ model.site_pos[site_id] + p
    return {"origin_rotation": np.array(rotations), "origin_position_m": np.array(positions),
            "joint_position_m": np.array(anchors), "joint_axis": np.array(axes),
            "tool_rotation": tool_rotation, "tool_position_m": tool_position}


def arm_tool_chain() -> dict[str, np.ndarray]:
    """``tool_chain`` of the shipped arm model (``sim/assets``): what a policy trains with."""
    return tool_chain(load_model())
