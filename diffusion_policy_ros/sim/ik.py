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

from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES, TCP_SITE_NAME


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
