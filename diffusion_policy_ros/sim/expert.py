"""Scripted grasp expert that outputs exactly what the policy outputs: action chunks.

Every control period the expert reads the current state (measured joints and
the target's pose: it is privileged, the policy sees camera data instead) and
returns a ``(horizon, 7)`` chunk (joint_1..joint_6 in rad + gripper opening in
m) for the instants ``now + k * dt_s``. It runs through the same ``PdTracker``
as the policy, so demonstrations contain only motion the tracker can execute.

Phases: ``pre_grasp`` (above the object, gripper open), ``descend`` (to the
grasp pose), ``close`` (gripper shut for ``close_s``), ``lift`` and ``hold``.
Goals are tool poses turned into joints by ``TcpIk``: tool pointing down, the
finger axis across the object's faces. Cubes have four equivalent yaws,
cylinders any; among the candidates the one closest to the tool's current yaw
is taken unless the open gripper would come down within ``tool_clearance_m``
of a neighbouring object (see ``tool_clearance``), then the closest one that
keeps clear, if need be with the grasp raised so the gripper housing passes
over a tall neighbour, else the pose with the most room.

Why the chunks are re-planned from the state rather than cut from a fixed
trajectory: a chunk is a function of (phase, time in phase, measured joints),
the kind of mapping a policy can learn, and consecutive chunks agree, so the
tracker's chunk ensembling averages consistent plans. The plan inside a chunk
is a rollout of the same phase machine on a virtual arm that moves straight
in joint space towards the phase goal, with a trapezoidal speed profile (ramp
up from the phase start at ``acceleration_rad_s2``, cruise at the phase speed,
brake so it stops at the goal), so a chunk crosses phase boundaries
(e.g. braking above the object, then descending) exactly as the arm will.
"""

from __future__ import annotations

import dataclasses
import enum
import math

import mujoco
import numpy as np

from diffusion_policy_ros.sim.ik import TcpIk
from diffusion_policy_ros.sim.scene import GRIPPER_OPEN_M, ArmScene, find_objects
from diffusion_policy_ros.sim.tool_clearance import Obstacle, clearance_m, open_gripper_boxes


class Phase(enum.StrEnum):
    PRE_GRASP = "pre_grasp"
    DESCEND = "descend"
    CLOSE = "close"
    LIFT = "lift"
    HOLD = "hold"


@dataclasses.dataclass(frozen=True)
class ExpertConfig:
    """Geometry and speeds of the scripted grasp."""

    horizon: int = 16
    """Points per chunk (the policy's action horizon)."""
    dt_s: float = 0.1
    """Time between chunk points (s)."""
    pregrasp_clearance_m: float = 0.10
    """Height of the pre-grasp tool pose above the grasp pose (m)."""
    grasp_depth_m: float = 0.02
    """The tool centre goes this far below the object's top (m)."""
    min_grasp_height_m: float = 0.03
    """Lowest tool centre height: the finger tips reach 2.5 cm below it (m)."""
    lift_m: float = 0.15
    """Lift of the tool above the grasp pose (m); > the task's 0.10 m, for slip margin."""
    transit_speed_rad_s: float = 1.0
    """Cruise speed of the fastest joint on the way to the pre-grasp pose (rad/s)."""
    approach_speed_rad_s: float = 0.35
    """Cruise speed of the fastest joint near the object: descend, lift (rad/s)."""
    acceleration_rad_s2: float = 2.0
    """Ramp-up and braking of the planned speed (rad/s^2)."""
    reach_tolerance_rad: float = 0.02
    """A pose counts as reached when every joint is this close (rad)."""
    grasp_tolerance_rad: float = 0.01
    """Tighter reach tolerance before closing the fingers (rad)."""
    min_finger_overlap_m: float = 0.02
    """A grasp raised to clear a tall neighbour keeps at least this much pad on the object (m)."""
    tool_clearance_m: float = 0.01
    """Room wanted between the open gripper and a neighbour's footprint circle (m)."""
    cylinder_yaw_candidates: int = 8
    """Finger axes tried for a round object, evenly over 180 degrees."""
    take_over_descend_radius_m: float = 0.015
    """``take_over`` descends straight when the tool is this close to the grasp pose in x-y
    (m); farther off it rises to the pre-grasp pose first, so the fingers clear the object."""
    grasp_tolerance_m: float = 0.005
    """``take_over`` counts a tool this far below the grasp pose as at it (m)."""
    close_s: float = 1.0
    """Time the fingers get to close and squeeze before lifting (s)."""
    gripper_open_m: float = GRIPPER_OPEN_M
    gripper_closed_m: float = 0.0
    """Commanded opening while grasping: below any object, so the gripper squeezes (m)."""


def down_rotation(yaw_rad: float) -> np.ndarray:
    """Tool rotation pointing straight down (z = -z_base) with its x axis at ``yaw_rad``.

    The fingers close along the tool's y axis, i.e. at ``yaw_rad - pi/2``.
    """
    c, s = math.cos(yaw_rad), math.sin(yaw_rad)
    return np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])


def tool_yaw(rotation) -> float:
    """Yaw (rad) of the tool's x axis projected on the table."""
    return math.atan2(rotation[1][0], rotation[0][0])


def wrap_angle(angle_rad: float, period_rad: float = 2.0 * math.pi) -> float:
    """``angle_rad`` wrapped into ``[-period/2, period/2)``."""
    return (angle_rad + 0.5 * period_rad) % period_rad - 0.5 * period_rad


def move_towards(q_rad: np.ndarray, goal_rad: np.ndarray, speed_cap_rad_s: float,
                 acceleration_rad_s2: float, phase_elapsed_s: float, dt_s: float) -> np.ndarray:
    """Joints one ``dt_s`` further along the straight line to ``goal_rad``.

    The fastest joint moves at ``min(cap, a (t + dt), braking speed)``; the
    braking speed ``sqrt((a dt)^2 + 2 a d) - a dt`` is the largest from which
    steps of ``a dt`` stop within the remaining distance ``d``.
    """
    delta = goal_rad - q_rad
    dist = float(np.abs(delta).max())
    if dist == 0.0:
        return q_rad
    a_dt = acceleration_rad_s2 * dt_s
    brake = math.sqrt(a_dt * a_dt + 2.0 * acceleration_rad_s2 * dist) - a_dt
    speed = min(speed_cap_rad_s, acceleration_rad_s2 * (phase_elapsed_s + dt_s), brake)
    return q_rad + delta * min(1.0, speed * dt_s / dist)


@dataclasses.dataclass(frozen=True)
class _Goals:
    """Joint goals of one grasp: above, at and lifted from the grasp pose."""

    pre: np.ndarray
    grasp: np.ndarray
    lift: np.ndarray
    yaw_rad: float
    grasp_m: np.ndarray
    """Tool centre position of the grasp pose in ``base_link`` (m)."""


class ScriptedExpert:
    """Phase machine + IK that returns one action chunk per call of ``act``."""

    def __init__(self, model: mujoco.MjModel, config: ExpertConfig | None = None):
        self.config = config or ExpertConfig()
        self.ik = TcpIk(model)
        self._objects = {o.name: o for o in find_objects(model)}
        self._cube_like = {o.name: model.geom_type[o.geom_id] == mujoco.mjtGeom.mjGEOM_BOX
                           for o in self._objects.values()}
        self._tool_boxes = open_gripper_boxes(model, self.config.gripper_open_m)
        #: How far the finger pads reach below the tool centre (m).
        self._finger_reach_m = -min(b.bottom_above_tcp_m for b in self._tool_boxes)
        self.target: str | None = None
        self.phase = Phase.PRE_GRASP
        self._phase_start_s: float | None = None
        self._goals: _Goals | None = None

    def reset(self, target: str) -> None:
        """Start a new episode that grasps object ``target``."""
        if target not in self._objects:
            raise ValueError(f"unknown object '{target}', expected one of {list(self._objects)}")
        self.target = target
        self.phase = Phase.PRE_GRASP
        self._phase_start_s = None
        self._goals = None

    @property
    def can_retarget(self) -> bool:
        """The gripper has not started closing on the current target."""
        return self.phase in (Phase.PRE_GRASP, Phase.DESCEND)

    def retarget(self, target: str) -> None:
        """Go for ``target`` instead, from wherever the arm is (a new instruction
        mid-episode); only while ``can_retarget``."""
        if target not in self._objects:
            raise ValueError(f"unknown object '{target}', expected one of {list(self._objects)}")
        if not self.can_retarget:
            raise RuntimeError(f"cannot retarget in phase {self.phase}: the gripper has closed")
        self.target = target
        self.phase = Phase.PRE_GRASP
        self._phase_start_s = None
        self._goals = None  # grasp yaw chosen afresh from the tool's current yaw

    def take_over(self, target: str, scene: ArmScene) -> None:
        """Grasp ``target`` from wherever another controller (the policy) left the arm,
        as a DAgger-style correction: straight down when the tool is already over the
        grasp pose and no higher than the pre-grasp pose, else via the pre-grasp pose."""
        self.reset(target)
        q = scene.joint_positions()[:6]
        self._goals = self._plan_goals(scene, q)
        offset = scene.tcp_pose()[0] - self._goals.grasp_m
        c = self.config
        if (float(np.hypot(offset[0], offset[1])) <= c.take_over_descend_radius_m
                and -c.grasp_tolerance_m <= offset[2] <= c.pregrasp_clearance_m):
            self.phase = Phase.DESCEND

    def act(self, scene: ArmScene) -> np.ndarray:
        """The ``(horizon, 7)`` chunk for the instants ``scene.time_s + k * dt_s``."""
        if self.target is None:
            raise RuntimeError("call reset(target) first")
        now_s = scene.time_s
        q = scene.joint_positions()[:6]
        if self._phase_start_s is None:
            self._phase_start_s = now_s
        if self.phase in (Phase.PRE_GRASP, Phase.DESCEND):
            self._goals = self._plan_goals(scene, q)  # follow the object until it is gripped
        self.phase, self._phase_start_s = self._settle_phase(self.phase, self._phase_start_s,
                                                             now_s, q)
        return self._rollout(now_s, q)

    # -- planning -----------------------------------------------------------------------------

    def _plan_goals(self, scene: ArmScene, q_rad: np.ndarray) -> _Goals:
        c = self.config
        assert self.target is not None  # act checks it
        obj = self._objects[self.target]
        centre = scene.object_position(obj.name)
        w, x, y, z = scene.data.xquat[obj.body_id]
        object_yaw = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
        reference = self._goals.yaw_rad if self._goals else tool_yaw(scene.tcp_pose()[1])
        grasp, yaw = self._choose_grasp(scene, centre, centre[2] + obj.half_height_m,
                                        object_yaw, reference)
        rot = down_rotation(yaw)
        lift_by = np.array([0.0, 0.0, c.lift_m])
        above = np.array([0.0, 0.0, c.pregrasp_clearance_m])
        pre = self.ik.solve(self._goals.pre if self._goals else q_rad, grasp + above, rot).q_rad
        at = self.ik.solve(pre, grasp, rot).q_rad
        lifted = self.ik.solve(at, grasp + lift_by, rot).q_rad
        return _Goals(pre, at, lifted, yaw, grasp)

    def _choose_grasp(self, scene: ArmScene, centre_m: np.ndarray, top_z_m: float,
                      object_yaw_rad: float, reference_rad: float) -> tuple[np.ndarray, float]:
        """(tool position, yaw) of the grasp that keeps the open gripper clear of neighbours.

        Yaws are tried from the one closest to ``reference_rad``, first at the nominal
        height, then raised in 5 mm steps while the pads still cover
        ``min_finger_overlap_m`` of the object (lifts the housing over a tall neighbour);
        if nothing keeps ``tool_clearance_m``, the pose with the most room.
        """
        c = self.config
        assert self.target is not None  # act checks it
        candidates: np.ndarray
        if self._cube_like[self.target]:  # fingers on opposite faces: every 90 degrees
            base = reference_rad + wrap_angle(object_yaw_rad - reference_rad, 0.5 * math.pi)
            candidates = base + 0.5 * math.pi * np.array([0.0, 1.0, -1.0])
        else:
            n = c.cylinder_yaw_candidates
            candidates = reference_rad + math.pi / n * np.arange(-(n // 2), n - n // 2)
        yaws = sorted(candidates, key=lambda y: abs(y - reference_rad))
        obstacles = []
        for o in self._objects.values():
            if o.name != self.target:
                centre = scene.object_position(o.name)
                obstacles.append(Obstacle(centre[:2], o.footprint_radius_m,
                                          centre[2] + o.half_height_m))
        nominal_z = max(top_z_m - c.grasp_depth_m, c.min_grasp_height_m)
        highest_z = top_z_m + self._finger_reach_m - c.min_finger_overlap_m
        best, best_room = (np.array([*centre_m[:2], nominal_z]), yaws[0]), -math.inf
        for z in np.arange(nominal_z, max(nominal_z, highest_z) + 1e-9, 0.005):
            grasp = np.array([centre_m[0], centre_m[1], z])
            for yaw in yaws:
                room = clearance_m(self._tool_boxes, grasp, yaw, obstacles)
                if room >= c.tool_clearance_m:
                    return grasp, float(yaw)
                if room > best_room:
                    best, best_room = (grasp, float(yaw)), room
        return best

    def _phase_goal(self, phase: Phase) -> tuple[np.ndarray, float, float]:
        """(joint goal, speed cap, gripper command) of ``phase``."""
        c, g = self.config, self._goals
        assert g is not None  # planned by act
        return {
            Phase.PRE_GRASP: (g.pre, c.transit_speed_rad_s, c.gripper_open_m),
            Phase.DESCEND: (g.grasp, c.approach_speed_rad_s, c.gripper_open_m),
            Phase.CLOSE: (g.grasp, c.approach_speed_rad_s, c.gripper_closed_m),
            Phase.LIFT: (g.lift, c.approach_speed_rad_s, c.gripper_closed_m),
            Phase.HOLD: (g.lift, c.approach_speed_rad_s, c.gripper_closed_m),
        }[phase]

    def _next_phase(self, phase: Phase, elapsed_s: float, q_rad: np.ndarray) -> Phase | None:
        """The phase that follows ``phase`` if its end condition holds, else None."""
        c, g = self.config, self._goals
        assert g is not None  # planned by act

        def reached(goal, tol):
            return float(np.abs(q_rad - goal).max()) <= tol

        if phase is Phase.PRE_GRASP and reached(g.pre, c.reach_tolerance_rad):
            return Phase.DESCEND
        if phase is Phase.DESCEND and reached(g.grasp, c.grasp_tolerance_rad):
            return Phase.CLOSE
        if phase is Phase.CLOSE and elapsed_s >= c.close_s - 1e-9:
            return Phase.LIFT
        if phase is Phase.LIFT and reached(g.lift, c.reach_tolerance_rad):
            return Phase.HOLD
        return None

    def _settle_phase(self, phase: Phase, start_s: float, now_s: float,
                      q_rad: np.ndarray) -> tuple[Phase, float]:
        """Apply every transition whose condition holds at ``now_s`` (phase, its start)."""
        nxt = self._next_phase(phase, now_s - start_s, q_rad)
        while nxt is not None:
            phase, start_s = nxt, now_s
            nxt = self._next_phase(phase, 0.0, q_rad)
        return phase, start_s

    def _rollout(self, now_s: float, q_rad: np.ndarray) -> np.ndarray:
        c = self.config
        chunk = np.empty((c.horizon, 7))
        phase, start_s, q = self.phase, self._phase_start_s, q_rad.copy()
        assert start_s is not None  # set by act
        for k in range(c.horizon):
            t = now_s + k * c.dt_s
            phase, start_s = self._settle_phase(phase, start_s, t, q)
            goal, speed, gripper = self._phase_goal(phase)
            chunk[k, :6], chunk[k, 6] = q, gripper
            q = move_towards(q, goal, speed, c.acceleration_rad_s2, t - start_s, c.dt_s)
        return chunk
