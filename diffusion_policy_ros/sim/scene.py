"""The simulated 6+1 DoF arm, table and objects as a torque-driven plant.

``ArmScene`` is what ``sim_node`` and offline data collection drive: efforts in
N m for ``joint_1``..``joint_6`` plus a gripper opening in metres, exactly the
commands the PD tracker publishes, and joint states in the order of the
``joint_states`` topic. Physics runs at the model timestep (2 ms = the 500 Hz
tracker period, so one tracker command is one physics step).

Gravity compensation works like torque-controlled arm firmware (UR, Franka,
KUKA): the controller adds the model's gravity torque g(q) of the robot (arm
and gripper, not a grasped payload) to the user torque, and the joint can only
deliver its effort limit in total. In the MJCF that is ``gravcomp="1"`` on the
robot bodies and ``actuatorgravcomp="true"`` on the joints: MuJoCo adds g(q)
into ``qfrc_actuator`` every step before clamping it to ``actuatorfrcrange``.
This is exact g(q) (no Coriolis, no payload), costs nothing extra per step and
cannot be forgotten by a caller. ``gravity_compensation`` recomputes the same
torque independently (RNE at zero velocity) for inspection and tests.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mujoco
import numpy as np

from diffusion_policy_ros.sim.layout import parking_spot_m, sample_object_layout

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
MJCF_PATH = ASSETS_DIR / "arm.xml"

ARM_JOINT_NAMES = ("joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6")
GRIPPER_JOINT_NAME = "gripper_joint"
#: Order of ``joint_states`` and of the 7 positions of an action-chunk point.
JOINT_NAMES = ARM_JOINT_NAMES + (GRIPPER_JOINT_NAME,)
GRIPPER_ACTUATOR_NAME = "gripper"
FINGER_LEFT_JOINT_NAME = "finger_left_joint"
TCP_SITE_NAME = "tcp"

#: Elbow-up pose, tool pointing straight down, TCP at about (0.51, 0, 0.37) m (MJCF key "home").
HOME_ARM_Q_RAD = np.array([-0.2655, -np.pi / 2, np.pi / 2, -np.pi / 2, -np.pi / 2, 0.0])
GRIPPER_OPEN_M = 0.085
#: Where objects are placed (base_link, metres, table top z = 0).
WORKSPACE_MIN_XY_M = np.array([0.35, -0.30])
WORKSPACE_MAX_XY_M = np.array([0.70, 0.30])
TABLE_TOP_Z_M = 0.0


def load_model(path: str | Path = MJCF_PATH) -> mujoco.MjModel:
    """Compile the MJCF scene (default: the packaged ``assets/arm.xml``)."""
    return mujoco.MjModel.from_xml_path(str(path))


@dataclasses.dataclass(frozen=True)
class SceneObject:
    """A graspable free body with a single box / cylinder / sphere geom."""

    name: str
    body_id: int
    geom_id: int
    qpos_adr: int
    qvel_adr: int
    half_height_m: float
    footprint_radius_m: float
    size_m: float
    """Largest extent (m): what "the smaller cube" compares."""


def find_objects(model: mujoco.MjModel) -> tuple[SceneObject, ...]:
    """Every body with a free joint, in model order (the graspable objects)."""
    objects = []
    for j in range(model.njnt):
        if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE:
            continue
        body = int(model.jnt_bodyid[j])
        if model.body_geomnum[body] != 1:
            raise ValueError(f"object body '{model.body(body).name}' must have exactly one geom")
        geom = int(model.body_geomadr[body])
        size = model.geom_size[geom]
        kind = model.geom_type[geom]
        if kind == mujoco.mjtGeom.mjGEOM_BOX:
            half_height, radius = size[2], float(np.hypot(size[0], size[1]))
            extent = 2 * size[:3].max()
        elif kind == mujoco.mjtGeom.mjGEOM_CYLINDER:
            half_height, radius = size[1], size[0]
            extent = 2 * max(size[0], size[1])
        elif kind == mujoco.mjtGeom.mjGEOM_SPHERE:
            half_height, radius = size[0], size[0]
            extent = 2 * size[0]
        else:
            raise ValueError(f"object '{model.body(body).name}' has unsupported geom type {kind}")
        objects.append(SceneObject(model.body(body).name, body, geom, int(model.jnt_qposadr[j]),
                                   int(model.jnt_dofadr[j]), float(half_height), float(radius),
                                   float(extent)))
    return tuple(objects)


def _joint_addresses(model: mujoco.MjModel, names) -> tuple[np.ndarray, np.ndarray]:
    ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in names]
    missing = [n for n, i in zip(names, ids, strict=True) if i < 0]
    if missing:
        raise ValueError(f"model lacks joints {missing}")
    return (np.array([model.jnt_qposadr[i] for i in ids]),
            np.array([model.jnt_dofadr[i] for i in ids]))


def gravity_compensation(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    """Gravity torque g(q) (N m) of ``joint_1``..``joint_6`` at the current positions.

    The torque the firmware model adds to the user torque: recursive
    Newton-Euler with zero velocity and zero acceleration, so Coriolis terms are
    left out, as on real arms. Objects are free bodies, not part of the
    kinematic tree, so a grasped payload is (realistically) not compensated.
    Recomputes kinematic quantities in ``data`` (as ``mj_forward`` would) and
    leaves its state (qpos, qvel) untouched.
    """
    _, dofs = _joint_addresses(model, ARM_JOINT_NAMES)
    qvel = data.qvel.copy()
    data.qvel[:] = 0.0
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    mujoco.mj_comVel(model, data)  # RNE reads the velocities from cvel, not from qvel
    bias = np.zeros(model.nv)
    mujoco.mj_rne(model, data, 0, bias)
    data.qvel[:] = qvel
    mujoco.mj_comVel(model, data)
    return bias[dofs]


class ArmScene:
    """One MuJoCo model and state with the project's joint conventions.

    Not thread-safe: one thread steps and reads, or the caller locks.
    """

    def __init__(self, model: mujoco.MjModel | None = None,
                 objects_on_table: tuple[int, int] | None = None):
        """``objects_on_table``: (fewest, most) objects a seeded reset puts on the table,
        drawn with the layout; None: every object, every episode."""
        self.model = model if model is not None else load_model()
        self.objects_on_table = objects_on_table
        self.data = mujoco.MjData(self.model)
        m = self.model
        self._arm_qpos, self._arm_dof = _joint_addresses(m, ARM_JOINT_NAMES)
        (self._grip_qpos,), (self._grip_dof,) = _joint_addresses(m, [GRIPPER_JOINT_NAME])
        (self._finger_qpos,), _ = _joint_addresses(m, [FINGER_LEFT_JOINT_NAME])
        self._arm_act = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, n)
                                  for n in ARM_JOINT_NAMES])
        self._grip_act = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, GRIPPER_ACTUATOR_NAME)
        if min(self._arm_act) < 0 or self._grip_act < 0:
            raise ValueError("model needs motor actuators named joint_1..joint_6 and 'gripper'")
        self._tcp_site = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, TCP_SITE_NAME)
        #: (6, 2) lower/upper effort (N m) per arm joint, from the actuator ctrlrange.
        self.effort_limits_nm = m.actuator_ctrlrange[self._arm_act].copy()
        #: (2,) gripper opening range (m).
        self.gripper_range_m = m.actuator_ctrlrange[self._grip_act].copy()
        #: (7, 2) position limits: 6 joints (rad) + gripper opening (m).
        jnt = [m.joint(n).id for n in JOINT_NAMES]
        self.position_limits = m.jnt_range[jnt].copy()
        #: (6,) velocity limits (rad/s), from the MJCF ``velocity_limit_rad_s`` custom numeric.
        self.velocity_limits_rad_s = m.numeric("velocity_limit_rad_s").data.copy()
        self.objects = find_objects(m)
        self.object_names = tuple(o.name for o in self.objects)
        if objects_on_table is not None and not \
                1 <= objects_on_table[0] <= objects_on_table[1] <= len(self.objects):
            raise ValueError(f"objects_on_table {objects_on_table} must be 1 <= fewest <= "
                             f"most <= {len(self.objects)} (the model's objects)")
        self.on_table: tuple[SceneObject, ...] = self.objects
        """The objects this episode stands on the table; the others wait under it."""
        self.reset()

    # -- time ---------------------------------------------------------------------------
    @property
    def timestep_s(self) -> float:
        return float(self.model.opt.timestep)

    @property
    def time_s(self) -> float:
        return float(self.data.time)

    # -- episodes -----------------------------------------------------------------------
    def reset(self, seed: int | None = None, arm_q_rad=None,
              gripper_opening_m: float = GRIPPER_OPEN_M, settle_s: float = 0.6) -> np.ndarray:
        """Start an episode; returns the layout of the objects on the table, ``(n, 3)``
        ``[x_m, y_m, yaw_rad]`` in ``on_table`` order.

        ``seed=None`` keeps the objects where the MJCF puts them; an integer draws a
        collision-free layout inside the workspace from ``np.random.default_rng(seed)``
        (and, with ``objects_on_table``, which objects stand there first).
        Objects are dropped from 1 mm above the table and the physics runs (arm held
        by gravity compensation alone) until they rest, at most ``settle_s``; then
        the clock is reset to 0.
        """
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        self.set_arm_state(HOME_ARM_Q_RAD if arm_q_rad is None else arm_q_rad,
                           gripper_opening_m=gripper_opening_m)
        if seed is None:
            self.on_table = tuple(o for o in self.objects if m.body_pos[o.body_id][2] > 0)
            layout = np.array([[*m.body_pos[o.body_id][:2], 0.0] for o in self.on_table])
        else:
            rng = np.random.default_rng(seed)
            self.on_table = self.objects
            if self.objects_on_table is not None:
                fewest, most = self.objects_on_table
                count = int(rng.integers(fewest, most + 1))
                chosen = np.sort(rng.choice(len(self.objects), count, replace=False))
                self.on_table = tuple(self.objects[i] for i in chosen)
            layout = sample_object_layout(rng, [o.footprint_radius_m for o in self.on_table],
                                          WORKSPACE_MIN_XY_M, WORKSPACE_MAX_XY_M)
        for obj, (x, y, yaw) in zip(self.on_table, layout, strict=True):
            self._place(obj, (x, y, TABLE_TOP_Z_M + obj.half_height_m + 0.001), yaw)
        parked = [o for o in self.objects if o not in self.on_table]
        for i, obj in enumerate(parked):
            self._place(obj, parking_spot_m(i, obj.half_height_m), 0.0)
        mujoco.mj_forward(m, d)
        self._settle(settle_s)
        d.time = 0.0
        mujoco.mj_forward(m, d)
        return layout

    def _place(self, obj: SceneObject, centre_m, yaw_rad: float) -> None:
        d = self.data
        d.qpos[obj.qpos_adr: obj.qpos_adr + 3] = centre_m
        d.qpos[obj.qpos_adr + 3: obj.qpos_adr + 7] = (np.cos(yaw_rad / 2), 0.0, 0.0,
                                                      np.sin(yaw_rad / 2))
        d.qvel[obj.qvel_adr: obj.qvel_adr + 6] = 0.0

    @property
    def on_table_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.on_table)

    def _settle(self, max_s: float, min_s: float = 0.1, speed_tol_m_s: float = 1e-3) -> None:
        steps_min = int(round(min_s / self.timestep_s))
        grip = float(self.data.ctrl[self._grip_act])
        for k in range(int(round(max_s / self.timestep_s))):
            self.step(np.zeros(6), grip)
            if k >= steps_min and self._max_object_speed_m_s() < speed_tol_m_s:
                break

    def _max_object_speed_m_s(self) -> float:
        if not self.objects:
            return 0.0
        return max(float(np.linalg.norm(self.data.qvel[o.qvel_adr: o.qvel_adr + 3]))
                   for o in self.objects)

    def set_arm_state(self, q_rad, qd_rad_s=None, gripper_opening_m: float | None = None) -> None:
        """Teleport the arm (and optionally the gripper) to a state, e.g. a home pose."""
        d = self.data
        d.qpos[self._arm_qpos] = np.asarray(q_rad, dtype=np.float64).reshape(6)
        d.qvel[self._arm_dof] = 0.0 if qd_rad_s is None else np.asarray(qd_rad_s).reshape(6)
        if gripper_opening_m is not None:
            opening = float(np.clip(gripper_opening_m, *self.gripper_range_m))
            d.qpos[self._grip_qpos] = opening
            d.qpos[self._finger_qpos] = 0.5 * opening
            d.qvel[self._grip_dof] = 0.0
            d.ctrl[self._grip_act] = opening
        mujoco.mj_forward(self.model, d)

    # -- control ------------------------------------------------------------------------
    def step(self, effort_nm, gripper_opening_m: float, n_steps: int = 1) -> None:
        """Apply arm efforts (N m) and a gripper opening target (m) for ``n_steps`` steps.

        Both are clamped to the limits in the model (efforts to the actuator
        ctrlrange = effort limits, the opening to its stroke). Non-finite
        commands raise ``ValueError`` instead of corrupting the physics.
        """
        effort = np.asarray(effort_nm, dtype=np.float64).reshape(-1)
        if effort.shape != (6,):
            raise ValueError(f"expected 6 efforts, got {effort.shape[0]}")
        if not (np.all(np.isfinite(effort)) and np.isfinite(gripper_opening_m)):
            raise ValueError(f"non-finite command: efforts {effort}, gripper {gripper_opening_m}")
        d = self.data
        d.ctrl[self._arm_act] = np.clip(effort, self.effort_limits_nm[:, 0],
                                        self.effort_limits_nm[:, 1])
        d.ctrl[self._grip_act] = np.clip(gripper_opening_m, *self.gripper_range_m)
        mujoco.mj_step(self.model, d, nstep=n_steps)

    def push_arm(self, torque_nm) -> None:
        """External joint torques (N m) from now on (``qfrc_applied``; 0 at ``reset``):
        a disturbance the tracker does not know of, as from a person pushing the arm."""
        torque = np.asarray(torque_nm, dtype=np.float64).reshape(-1)
        if torque.shape != (6,) or not np.all(np.isfinite(torque)):
            raise ValueError(f"expected 6 finite torques, got {torque}")
        self.data.qfrc_applied[self._arm_dof] = torque

    # -- state --------------------------------------------------------------------------
    def joint_positions(self) -> np.ndarray:
        """(7,) ``joint_1``..``joint_6`` (rad) and the gripper opening (m)."""
        return np.append(self.data.qpos[self._arm_qpos], self.data.qpos[self._grip_qpos])

    def joint_velocities(self) -> np.ndarray:
        """(7,) joint velocities (rad/s) and the gripper opening rate (m/s)."""
        return np.append(self.data.qvel[self._arm_dof], self.data.qvel[self._grip_dof])

    def joint_efforts(self) -> np.ndarray:
        """(7,) delivered joint torques (N m, user torque + gravity compensation after
        the joint's clamp, what an arm reports as measured torque) and the gripper
        force (N, negative = closing)."""
        return np.append(self.data.qfrc_actuator[self._arm_dof],
                         self.data.actuator_force[self._grip_act])

    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """(position (3,) m, rotation (3, 3)) of the tool centre point in ``base_link``."""
        return (self.data.site_xpos[self._tcp_site].copy(),
                self.data.site_xmat[self._tcp_site].reshape(3, 3).copy())

    def object_position(self, name: str) -> np.ndarray:
        """Centre of object ``name`` in ``base_link`` (m)."""
        return self.data.xpos[self.model.body(name).id].copy()

    def object_positions(self) -> dict[str, np.ndarray]:
        return {o.name: self.data.xpos[o.body_id].copy() for o in self.objects}

    def object_quat_xyzw(self, name: str) -> np.ndarray:
        w, x, y, z = self.data.xquat[self.model.body(name).id]
        return np.array([x, y, z, w])
