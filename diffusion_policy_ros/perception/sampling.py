"""Point-cloud downsampling to a fixed point count.

``VoxelGrid`` keeps one measured point per occupied voxel rather than the
voxel centroid: it is cheaper and never puts
"ghost" points between a foreground edge and the background behind it.
``farthest_point_indices`` uses open3d's C++ farthest-point sampler (a numpy
loop over 1024 picks is an order of magnitude slower at a few thousand points;
figures in docs/explanation/benchmarks.md, "Measurements behind the code's design").
open3d is imported on first use (about a second): the point-cloud message helpers
here are imported by processes that never sample; ``load_fps_backend`` takes that
second at a pipeline's start-up rather than on its first frame.
"""

from __future__ import annotations

import numpy as np

SAMPLERS = ("fps", "uniform")


class VoxelGrid:
    """Dense occupancy grid over a fixed box for fast voxel downsampling.

    Keeps one measured point per occupied voxel of edge ``voxel_size_m``.
    A dense grid over the (small, fixed) workspace replaces the sort that
    ``np.unique`` needs, several times faster at tens of thousands of points.
    Points must lie inside ``[min_xyz, max_xyz]`` (crop first).
    """

    MAX_CELLS = 16_000_000

    def __init__(self, min_xyz, max_xyz, voxel_size_m: float):
        self.min_xyz = np.asarray(min_xyz, dtype=np.float32)
        self.voxel_size_m = float(voxel_size_m)
        extent = np.asarray(max_xyz, dtype=np.float64) - self.min_xyz
        self.dims = np.floor(extent / self.voxel_size_m).astype(np.int64) + 1
        cells = int(np.prod(self.dims))
        if cells > self.MAX_CELLS:
            raise ValueError(f"workspace / voxel_size_m gives {cells} voxels (max "
                             f"{self.MAX_CELLS}); use a larger voxel_size_m or a smaller workspace")
        self._occupied = np.zeros(cells, dtype=bool)
        self._representative = np.zeros(cells, dtype=np.int64)

    def downsample(self, points: np.ndarray) -> np.ndarray:
        """Indices of one point per occupied voxel, ordered by voxel."""
        if points.shape[0] == 0:
            return np.zeros(0, dtype=np.intp)
        cells = ((points - self.min_xyz) * np.float32(1.0 / self.voxel_size_m)).astype(np.int64)
        np.clip(cells, 0, self.dims - 1, out=cells)
        keys = (cells[:, 0] * self.dims[1] + cells[:, 1]) * self.dims[2] + cells[:, 2]
        self._occupied[keys] = True
        self._representative[keys] = np.arange(points.shape[0])
        occupied = np.flatnonzero(self._occupied)
        self._occupied[occupied] = False
        return self._representative[occupied]


def load_fps_backend() -> None:
    """Import open3d now (``farthest_point_indices`` would on its first call)."""
    import open3d  # noqa: F401


def farthest_point_indices(points: np.ndarray, count: int) -> np.ndarray:
    """Indices of ``count`` points picked by farthest-point sampling from point 0."""
    if count >= points.shape[0]:
        return np.arange(points.shape[0])
    import open3d as o3d

    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points.astype(np.float64)))
    # open3d returns the picked points, not their indices; tag each with its index.
    cloud.colors = o3d.utility.Vector3dVector(
        np.repeat(np.arange(points.shape[0], dtype=np.float64)[:, None], 3, axis=1))
    picked = cloud.farthest_point_down_sample(count)
    return np.asarray(picked.colors)[:, 0].astype(np.intp)


def uniform_indices(n: int, count: int, seed: int = 0) -> np.ndarray:
    """``count`` of ``n`` indices chosen uniformly with a fixed seed (sorted)."""
    if count >= n:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=count, replace=False))


def thin_by_coarser_voxels(points: np.ndarray, target: int, voxel_size_m: float) -> np.ndarray:
    """Indices of about ``target`` points: one per voxel of a coarser grid.

    Points from a ``voxel_size_m`` grid lie on surfaces, so their count falls
    with the square of the voxel edge; one ``np.unique`` pass at the scaled
    edge lands near ``target``. Returns every index when that would leave
    fewer than ``target // 2`` points.
    """
    n = points.shape[0]
    coarse = voxel_size_m * np.sqrt(n / target)
    cells = np.floor(points / coarse).astype(np.int64)
    cells -= cells.min(axis=0)
    dims = cells.max(axis=0) + 1
    keys = (cells[:, 0] * dims[1] + cells[:, 1]) * dims[2] + cells[:, 2]
    _, first = np.unique(keys, return_index=True)
    if first.size < target // 2:
        return np.arange(n)
    return np.sort(first)


def fixed_count_indices(points: np.ndarray, count: int, sampler: str = "fps",
                        voxel_size_m: float | None = None) -> tuple[np.ndarray, int]:
    """(exactly ``count`` indices into ``points``, number of padded entries).

    More points than ``count``: subsample with ``sampler``. FPS costs
    O(points x count), so with ``voxel_size_m`` given and more than
    ``2 * count`` points they are first thinned to about ``2 * count`` on a
    coarser voxel grid (``dpr bench perception``, "table included"). Fewer points than
    ``count``: every point once, then repeated cyclically from the first
    (deterministic), so the output shape is fixed and the padding reported.
    """
    n = points.shape[0]
    if n == 0:
        raise ValueError("cannot sample from an empty point set")
    if n >= count:
        if sampler == "fps":
            candidates = np.arange(n)
            if voxel_size_m is not None and n > 2 * count:
                candidates = thin_by_coarser_voxels(points, 2 * count, voxel_size_m)
                if candidates.size < count:
                    candidates = np.arange(n)
            return candidates[farthest_point_indices(points[candidates], count)], 0
        if sampler == "uniform":
            return uniform_indices(n, count), 0
        raise ValueError(f"unknown sampler '{sampler}', expected one of {SAMPLERS}")
    return np.resize(np.arange(n), count), count - n


def pack_rgb_float(rgb: np.ndarray) -> np.ndarray:
    """PCL-style packed colour: uint8 RGB ``(n, 3)`` -> float32 whose bits are 0x00RRGGBB."""
    rgb = rgb.astype(np.uint32)
    packed = (rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2]
    return packed.view(np.float32)


def unpack_rgb_float(packed: np.ndarray) -> np.ndarray:
    """Inverse of ``pack_rgb_float``."""
    bits = np.ascontiguousarray(packed, dtype=np.float32).view(np.uint32)
    channels = [(bits >> 16) & 0xFF, (bits >> 8) & 0xFF, bits & 0xFF]
    return np.stack(channels, axis=-1).astype(np.uint8)


XYZRGB_FIELDS = ("x", "y", "z", "rgb")
"""PointCloud2 layout of observation/points and camera/points: float32 each, 16 bytes a point."""
POINTFIELD_FLOAT32 = 7
"""sensor_msgs/PointField.FLOAT32."""


def xyzrgb_bytes(points: np.ndarray, colors: np.ndarray) -> np.ndarray:
    """``(16 n,)`` uint8 PointCloud2 data for float32 x y z + packed rgb."""
    buf = np.empty((points.shape[0], 4), dtype=np.float32)
    buf[:, :3] = points
    buf[:, 3] = pack_rgb_float(colors)
    return buf.view(np.uint8).reshape(-1)


def xyzrgb_from_bytes(data, n_points: int, point_step: int,
                      fields: dict[str, tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(points ``(n, 3)`` float32, colours ``(n, 3)`` uint8) from PointCloud2 data.

    ``fields`` maps a field name to its (offset, datatype); x y z rgb must be float32.
    Raises ``ValueError`` for other layouts or a data size that does not fit.
    """
    missing = [n for n in XYZRGB_FIELDS if n not in fields]
    wrong = [n for n in XYZRGB_FIELDS if n in fields and fields[n][1] != POINTFIELD_FLOAT32]
    if missing or wrong:
        raise ValueError(f"PointCloud2 needs float32 x y z rgb fields, missing {missing}, "
                         f"not float32 {wrong}")
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size != n_points * point_step:
        raise ValueError(f"PointCloud2 data has {raw.size} bytes, expected "
                         f"{n_points} x {point_step}")
    rows = raw.reshape(n_points, point_step)

    def col(name: str) -> np.ndarray:
        o = fields[name][0]
        return rows[:, o: o + 4].copy().view(np.float32)[:, 0]

    points = np.stack([col("x"), col("y"), col("z")], axis=1)
    return points, unpack_rgb_float(col("rgb"))
