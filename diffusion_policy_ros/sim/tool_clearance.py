"""Room around a top-down grasp: the open gripper's footprint against neighbouring objects.

Layouts pack objects as close as 1 cm, so a top-down grasp can put an open
finger pad onto a neighbour, or the gripper housing (3 cm above the tool centre,
58 mm to either side along the finger axis) onto a tall cylinder next to a
small cube. Seen from above, the open pads and the housing are rectangles in
the tool's x/y axes; each neighbour is its footprint circle (which holds the
object at any yaw) and matters to a rectangle only if it reaches up to that
rectangle's bottom. The expert picks the grasp yaw with this.
"""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np

from diffusion_policy_ros.sim.scene import TCP_SITE_NAME

PAD_GEOM_NAMES = ("finger_left_pad", "finger_right_pad")
HOUSING_GEOM_NAME = "gripper_housing"


@dataclasses.dataclass(frozen=True)
class ToolBox:
    """One rectangle of the tool seen from above, in the tool x/y axes (m)."""

    centre_y_m: float
    half_x_m: float
    half_y_m: float
    bottom_above_tcp_m: float
    """Height of the box's lowest face above the tool centre (negative: below it)."""


@dataclasses.dataclass(frozen=True)
class Obstacle:
    """A neighbouring object: footprint circle and top height in ``base_link`` (m)."""

    xy_m: np.ndarray
    radius_m: float
    top_z_m: float


def open_gripper_boxes(model: mujoco.MjModel, opening_m: float) -> tuple[ToolBox, ...]:
    """The two pads at ``opening_m`` and the housing, for a tool pointing straight down.

    The tool frame (``tcp`` site) has the gripper body's axes: fingers slide along
    y, z is the approach direction, so "above the tcp" is ``-z`` of the gripper.
    """
    tcp_z = float(model.site(TCP_SITE_NAME).pos[2])
    boxes = []
    for name in PAD_GEOM_NAMES:
        geom = model.geom(name)
        half_x, half_y, half_len = geom.size
        side = math.copysign(1.0, geom.pos[1])  # each pad sits outside its finger's axis
        centre_y = side * (0.5 * opening_m + abs(geom.pos[1]))
        boxes.append(ToolBox(centre_y, half_x, half_y, -half_len))
    housing = model.geom(HOUSING_GEOM_NAME)
    hx, hy, hz = housing.size
    boxes.append(ToolBox(float(housing.pos[1]), hx, hy, tcp_z - (housing.pos[2] + hz)))
    return tuple(boxes)


def clearance_m(boxes, tcp_position_m, yaw_rad: float, obstacles) -> float:
    """Smallest horizontal gap (m) between the tool's boxes and the obstacles they reach.

    ``yaw_rad`` is the direction of the tool x axis (tool y = ``(sin, -cos)``).
    Returns ``inf`` when no obstacle reaches any box; negative gaps overlap.
    """
    c, s = math.cos(yaw_rad), math.sin(yaw_rad)
    x_axis, y_axis = np.array([c, s]), np.array([s, -c])
    tcp_xy, tcp_z = np.asarray(tcp_position_m[:2]), float(tcp_position_m[2])
    gap = math.inf
    for ob in obstacles:
        rel = ob.xy_m - tcp_xy
        u, v = float(rel @ x_axis), float(rel @ y_axis)
        for box in boxes:
            if ob.top_z_m <= tcp_z + box.bottom_above_tcp_m:
                continue
            du = max(abs(u) - box.half_x_m, 0.0)
            dv = max(abs(v - box.centre_y_m) - box.half_y_m, 0.0)
            gap = min(gap, math.hypot(du, dv) - ob.radius_m)
    return gap
