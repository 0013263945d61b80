"""Where the workspace floor must be: the table top's height and its depth noise.

The observation cloud is cropped to a box whose floor (``workspace_min`` z) leaves the
table out. A time-of-flight camera scatters the table top around its true height; a
floor inside that scatter lets table points into the cloud, and there they outvote an
object whose brightest face the gripper hides (docs/explanation/rl.md, "Depth noise and the
table"). This measures the scatter from depth frames of the table, so the floor can be
set from the camera at hand rather than from the simulated twin's noise model.

A table pixel is one whose median height over the frames (a static camera and table)
lies within ``table_band_m`` of the most common median height inside the workspace's
x-y extent; objects, their sides and the arm's resting pixels stand higher. The noise
is the standard deviation of those pixels' heights over all frames, leaving out what is
more than ``OCCLUDER_SIGMAS`` robust deviations (1.4826 x median absolute deviation)
away: something over the table in that frame.
"""

from __future__ import annotations

import dataclasses
from statistics import NormalDist

import numpy as np

from diffusion_policy_ros.perception.geometry import PixelRays, Workspace

#: Table pixels per frame the recommended floor may let through, for Gaussian noise of
#: the measured spread: one pixel in a hundred frames.
DEFAULT_LEAK_PER_FRAME = 0.01
#: A table pixel's height further than this many standard deviations from the table is
#: something over it in that frame (the arm), not noise.
OCCLUDER_SIGMAS = 10.0
#: The least the floor clears the table by, for a camera that measures no noise.
MIN_CLEARANCE_M = 0.001


@dataclasses.dataclass(frozen=True)
class TableFloor:
    """The table top's height and noise in the base frame, and the floor they ask for."""

    table_z_m: float
    noise_sigma_m: float
    frames: int
    #: Heights above the table top of its pixels: p99, p99.9, p99.99 and the highest (m).
    above_table_m: dict[str, float]
    leak_per_frame: float
    #: The table pixels (indices into a ``table_heights_m`` row), each seen in at least
    #: half of the frames.
    pixel_index: np.ndarray = dataclasses.field(repr=False, compare=False)

    @property
    def table_pixels(self) -> int:
        """How many pixels are the table top."""
        return int(self.pixel_index.size)

    @property
    def recommended_sigmas(self) -> float:
        """Standard deviations above the table where Gaussian noise of the measured
        spread leaves ``leak_per_frame`` of the ``table_pixels`` per frame."""
        return NormalDist().inv_cdf(1.0 - self.leak_per_frame / max(self.table_pixels, 1))

    @property
    def recommended_floor_z_m(self) -> float:
        """``workspace_min`` z that keeps the table out of the cloud: the Gaussian floor
        above, or the highest table pixel seen if that is higher (a heavier tail)."""
        return self.table_z_m + max(self.recommended_sigmas * self.noise_sigma_m,
                                    self.above_table_m["max"], MIN_CLEARANCE_M)


def table_heights_m(depth_m: np.ndarray, rays: PixelRays, workspace: Workspace) -> np.ndarray:
    """(len(rays.rows),) float32 base-frame z (m) of each of ``rays``' pixels, NaN where
    there is no return (depth NaN or 0) or the point lies outside the workspace's x-y
    extent. ``rays``: ``PixelRays.build(camera, camera_to_base, stride=1)``, built once
    per camera_info (the undistortion is the costly part)."""
    z = depth_m[rays.rows, rays.cols].astype(np.float32)
    index = np.flatnonzero(np.isfinite(z) & (z > 0.0))
    points = rays.points(z[index], index)
    lo, hi = workspace.min_xyz, workspace.max_xyz
    inside_xy = np.all((points[:, :2] >= lo[:2]) & (points[:, :2] <= hi[:2]), axis=1)
    heights = np.full(z.shape, np.nan, dtype=np.float32)
    heights[index[inside_xy]] = points[inside_xy, 2]
    return heights


def _table_pixels(heights: np.ndarray, table_band_m: float, bin_m: float) -> np.ndarray:
    """Indices of the pixels whose median height is the table's (see the module doc)."""
    seen = np.sum(np.isfinite(heights), axis=0) >= max(1, heights.shape[0] // 2)
    if not np.any(seen):
        raise ValueError("no depth pixel falls inside the workspace's x-y extent: check "
                         "camera_to_base and the workspace box")
    index = np.flatnonzero(seen)
    medians = np.nanmedian(heights[:, index], axis=0)
    edges = np.arange(medians.min(), medians.max() + 2 * bin_m, bin_m)
    counts, edges = np.histogram(medians, bins=edges)
    mode = 0.5 * (edges[np.argmax(counts)] + edges[np.argmax(counts) + 1])
    return index[np.abs(medians - mode) <= table_band_m]


def estimate_table_floor(heights: np.ndarray,
                         leak_per_frame: float = DEFAULT_LEAK_PER_FRAME,
                         table_band_m: float = 0.003, bin_m: float = 0.001) -> TableFloor:
    """The table top's height and noise from (frames, pixels) ``table_heights_m`` rows."""
    heights = np.atleast_2d(np.asarray(heights, dtype=np.float32))
    if heights.size == 0:
        raise ValueError("no depth frames to measure the table from")
    table = _table_pixels(heights, table_band_m, bin_m)
    values = heights[:, table]
    values = values[np.isfinite(values)].astype(np.float64)
    table_z = float(np.median(values))
    # At least a bin: noise-free or coarsely quantised depth has a zero median deviation.
    robust_sigma = max(1.4826 * np.median(np.abs(values - table_z)), bin_m)
    # What passes over a table pixel in some frames (the arm) is not its noise.
    above = values[np.abs(values - table_z) <= OCCLUDER_SIGMAS * robust_sigma] - table_z
    sigma = float(np.std(above))
    percentiles = np.percentile(above, [99.0, 99.9, 99.99])
    return TableFloor(table_z_m=table_z, noise_sigma_m=sigma, frames=heights.shape[0],
                      above_table_m={"p99": float(percentiles[0]), "p99.9": float(percentiles[1]),
                                     "p99.99": float(percentiles[2]), "max": float(above.max())},
                      leak_per_frame=leak_per_frame, pixel_index=table)


def table_pixels_above(heights: np.ndarray, table: TableFloor, floor_z_m: float) -> float:
    """Table pixels per frame at or above ``floor_z_m``: what a floor there lets in."""
    heights = np.atleast_2d(heights)
    values = heights[:, table.pixel_index]
    ceiling = table.table_z_m + OCCLUDER_SIGMAS * table.noise_sigma_m
    return float(np.sum((values >= floor_z_m) & (values <= ceiling))) / heights.shape[0]
