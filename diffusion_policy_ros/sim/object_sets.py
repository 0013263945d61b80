"""Object sets of the simulated table: the five objects of the shipped task, or a larger
pool of which each episode puts a seeded few on the table.

``five`` (the default, ``assets/arm.xml`` as it is): red, green and blue cubes of three
sizes, a yellow and a purple cylinder, all on the table every episode; colour alone
names each. ``varied`` adds the ``EXTRA_OBJECTS`` below to the same model: colours
repeat (two red cubes, a red ball), shapes repeat in other colours, sizes differ within
a shape, so an instruction often needs a size, a shape or a place to name one object.
Every episode draws how many and which objects stand on the table
(``SimConfig.objects_on_table``); the others wait on the floor under the table, where
the camera cannot see them and the cloud's workspace leaves them out.

Object names are ``<colour>_<shape>[_<tag>]`` (``instructions.vocabulary.describe``).
"""

from __future__ import annotations

import dataclasses

import mujoco

from diffusion_policy_ros.sim.layout import parking_spot_m
from diffusion_policy_ros.sim.scene import MJCF_PATH, load_model

OBJECT_SETS = ("five", "varied")
#: Surface colours (RGBA) of the colour words, as the five objects of assets/arm.xml.
RGBA = {"red": (0.85, 0.1, 0.1, 1.0), "green": (0.1, 0.7, 0.15, 1.0),
        "blue": (0.1, 0.25, 0.9, 1.0), "yellow": (0.95, 0.85, 0.1, 1.0),
        "purple": (0.6, 0.2, 0.75, 1.0)}
_GEOM = {"cube": mujoco.mjtGeom.mjGEOM_BOX, "cylinder": mujoco.mjtGeom.mjGEOM_CYLINDER,
         "sphere": mujoco.mjtGeom.mjGEOM_SPHERE}


@dataclasses.dataclass(frozen=True)
class ObjectKind:
    """One graspable object: ``size_m`` is MuJoCo's geom size (half extents of a box;
    radius and half height of a cylinder; radius of a sphere)."""

    name: str
    size_m: tuple[float, ...]
    mass_kg: float

    @property
    def half_height_m(self) -> float:
        return self.size_m[{"cube": 2, "cylinder": 1, "sphere": 0}[self.shape]]

    @property
    def colour(self) -> str:
        return self.name.split("_")[0]

    @property
    def shape(self) -> str:
        return self.name.split("_")[1]


#: What ``varied`` adds to the five; every one fits the open gripper (85 mm) across.
EXTRA_OBJECTS = (
    ObjectKind("red_cube_small", (0.016, 0.016, 0.016), 0.04),
    ObjectKind("red_sphere", (0.022,), 0.05),
    ObjectKind("blue_sphere", (0.025,), 0.06),
    ObjectKind("green_sphere", (0.02,), 0.04),
    ObjectKind("green_cylinder", (0.02, 0.035), 0.07),
    ObjectKind("blue_cylinder_short", (0.022, 0.025), 0.06),
    ObjectKind("yellow_cube", (0.021, 0.021, 0.021), 0.07),
    ObjectKind("purple_cube_large", (0.027, 0.027, 0.027), 0.12),
)


def load_object_set(name: str) -> mujoco.MjModel:
    """The scene's model with object set ``name`` (``OBJECT_SETS``)."""
    if name not in OBJECT_SETS:
        raise ValueError(f"object_set must be one of {OBJECT_SETS}, got {name!r}")
    if name == "five":
        return load_model()
    spec = mujoco.MjSpec.from_file(str(MJCF_PATH))
    style = spec.find_default("object")
    for i, kind in enumerate(EXTRA_OBJECTS):
        body = spec.worldbody.add_body(name=kind.name,
                                       pos=parking_spot_m(i, kind.half_height_m))
        body.add_freejoint(name=kind.name)
        size = [*kind.size_m, 0.0, 0.0][:3]
        body.add_geom(style, name=kind.name, type=_GEOM[kind.shape], size=size,
                      rgba=list(RGBA[kind.colour]), mass=kind.mass_kg)
        body.add_site(name=kind.name, size=[0.002, 0, 0], rgba=[0, 0, 0, 0])
    return spec.compile()
