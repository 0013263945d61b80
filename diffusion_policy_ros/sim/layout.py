"""Seeded, collision-free object layouts on the table (pure numpy, no MuJoCo).

Each object is reduced to its footprint circle (the circumscribed circle of
its base, so any yaw fits inside it). Layouts are drawn by rejection sampling:
two circles whose centres are at least ``r_i + r_j + clearance`` apart cannot
overlap whatever the yaws, and a centre kept ``r`` inside the workspace keeps
the whole object inside it. Separate from ``scene`` so it can be tested over
thousands of seeds in milliseconds.
"""

from __future__ import annotations

import numpy as np


def sample_object_layout(rng: np.random.Generator, footprint_radii_m, min_xy_m, max_xy_m,
                         clearance_m: float = 0.01, tries_per_object: int = 200,
                         max_restarts: int = 100) -> np.ndarray:
    """``(n, 3)`` array of ``[x_m, y_m, yaw_rad]``, one row per footprint radius.

    Objects are placed largest first (the hardest to fit); if one cannot be
    placed in ``tries_per_object`` draws the whole layout restarts. Raises
    ``ValueError`` when the workspace cannot hold an object at all and
    ``RuntimeError`` when no layout was found (workspace too crowded).
    """
    radii = np.asarray(footprint_radii_m, dtype=np.float64).reshape(-1)
    lo_xy = np.asarray(min_xy_m, dtype=np.float64).reshape(2)
    hi_xy = np.asarray(max_xy_m, dtype=np.float64).reshape(2)
    if np.any(hi_xy - lo_xy < 2.0 * radii.max(initial=0.0)):
        raise ValueError(f"workspace {lo_xy}..{hi_xy} is smaller than the largest object "
                         f"footprint (radius {radii.max():.3f} m)")
    order = np.argsort(-radii, kind="stable")
    for _ in range(max_restarts):
        layout = np.zeros((radii.size, 3))
        placed: list[int] = []
        for i in order:
            lo, hi = lo_xy + radii[i], hi_xy - radii[i]
            for _ in range(tries_per_object):
                xy = rng.uniform(lo, hi)
                if all(np.hypot(*(xy - layout[j, :2])) >= radii[i] + radii[j] + clearance_m
                       for j in placed):
                    layout[i, :2] = xy
                    layout[i, 2] = rng.uniform(-np.pi, np.pi)
                    placed.append(i)
                    break
            else:
                break
        if len(placed) == radii.size:
            return layout
    raise RuntimeError(f"no collision-free layout for {radii.size} objects in "
                       f"{lo_xy}..{hi_xy} after {max_restarts} restarts")


def footprints_overlap(layout: np.ndarray, footprint_radii_m, clearance_m: float = 0.0) -> bool:
    """True if any two footprint circles of ``layout`` are closer than ``clearance_m``."""
    xy = np.asarray(layout)[:, :2]
    radii = np.asarray(footprint_radii_m, dtype=np.float64)
    dist = np.linalg.norm(xy[:, None, :] - xy[None, :, :], axis=-1)
    need = radii[:, None] + radii[None, :] + clearance_m
    np.fill_diagonal(dist, np.inf)
    return bool(np.any(dist < need))


#: Where objects off the table wait: on the floor under the table top (base frame, m),
#: out of the camera's sight and below the cloud's workspace.
PARKING_ORIGIN_M = np.array([0.0, -0.5, -0.75])
PARKING_PITCH_M = 0.12


def parking_spot_m(index: int, half_height_m: float) -> list[float]:
    """Centre of parking place ``index`` (five to a row) for an object that tall."""
    x = PARKING_ORIGIN_M[0] + PARKING_PITCH_M * (index % 5)
    y = PARKING_ORIGIN_M[1] + PARKING_PITCH_M * (index // 5)
    return [float(x), float(y), float(PARKING_ORIGIN_M[2] + half_height_m + 0.001)]
