"""Analytic Kinect-like RGB-D frames of a table plane and a box, with exact geometry.

Used where a known ground truth is needed without a simulator: perception
tests, the perception benchmark and the sync-node demo. Rays are cast through
the (optionally distorted) pixel grid, so the frames exercise undistortion,
row padding and millimetre quantization like a real registered Kinect stream.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from diffusion_policy_ros.perception.geometry import (
    CameraModel,
    RigidTransform,
    undistorted_normalized,
)
from diffusion_policy_ros.perception.image_decoding import RawImage

#: Azure Kinect-like colour intrinsics (1280x720 colour mode, rational_polynomial).
KINECT_720P = CameraModel(1280, 720, (605.0, 0.0, 639.5, 0.0, 605.0, 365.2, 0.0, 0.0, 1.0),
                          "rational_polynomial",
                          (0.45, -2.6, 0.0004, -0.0002, 1.5, 0.33, -2.4, 1.43))
#: Azure Kinect NFOV unbinned depth-mode sized frame (640x576).
KINECT_NFOV = CameraModel(640, 576, (504.0, 0.0, 319.5, 0.0, 504.0, 328.7, 0.0, 0.0, 1.0),
                          "rational_polynomial",
                          (0.45, -2.6, 0.0004, -0.0002, 1.5, 0.33, -2.4, 1.43))


@dataclasses.dataclass
class TableBoxScene:
    """A table top (z = ``table_z_m`` within ``table_min/max`` xy) and an axis-aligned box."""

    table_z_m: float = 0.0
    table_min_xy: tuple[float, float] = (-0.2, -0.8)
    table_max_xy: tuple[float, float] = (1.6, 0.8)
    box_min: tuple[float, float, float] = (0.45, -0.05, 0.0)
    box_max: tuple[float, float, float] = (0.55, 0.05, 0.12)
    table_rgb: tuple[int, int, int] = (150, 120, 90)
    box_rgb: tuple[int, int, int] = (200, 30, 30)

    def distance_to_surfaces(self, points: np.ndarray) -> np.ndarray:
        """Distance (m) of base-frame points to the nearest of table top and box surface."""
        d_table = np.abs(points[:, 2] - self.table_z_m)
        lo, hi = np.asarray(self.box_min), np.asarray(self.box_max)
        outside = np.maximum(np.maximum(lo - points, points - hi), 0.0)
        d_out = np.linalg.norm(outside, axis=1)
        d_in = np.min(np.minimum(points - lo, hi - points), axis=1)
        d_box = np.where(np.any(outside > 0, axis=1), d_out, np.abs(d_in))
        return np.minimum(d_table, d_box)


class SyntheticKinect:
    """Renders ``TableBoxScene`` as bgra8 colour + 16UC1 depth registered to colour."""

    def __init__(self, camera: CameraModel, camera_to_base: RigidTransform,
                 scene: TableBoxScene | None = None, row_padding_bytes: int = 64):
        self.camera = camera
        self.camera_to_base = camera_to_base
        self.scene = scene or TableBoxScene()
        self.row_padding_bytes = row_padding_bytes
        v, u = np.mgrid[0: camera.height, 0: camera.width]
        xy = undistorted_normalized(camera, u.ravel(), v.ravel())
        rays_cam = np.concatenate([xy, np.ones((xy.shape[0], 1))], axis=1)
        self._rays = rays_cam @ camera_to_base.rotation.T
        self._origin = camera_to_base.translation
        self.depth_m, self.rgb = self._render()

    def _render(self) -> tuple[np.ndarray, np.ndarray]:
        s, o, r = self.scene, self._origin, self._rays
        n = r.shape[0]
        t_hit = np.full(n, np.inf)
        rgb = np.zeros((n, 3), dtype=np.uint8)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (s.table_z_m - o[2]) / r[:, 2]
            p = o + t[:, None] * r
            on_table = ((t > 0) & (p[:, 0] >= s.table_min_xy[0]) & (p[:, 0] <= s.table_max_xy[0])
                        & (p[:, 1] >= s.table_min_xy[1]) & (p[:, 1] <= s.table_max_xy[1]))
            t_hit[on_table] = t[on_table]
            rgb[on_table] = s.table_rgb
            lo, hi = np.asarray(s.box_min), np.asarray(s.box_max)
            t1, t2 = (lo - o) / r, (hi - o) / r
            t_near = np.nanmax(np.minimum(t1, t2), axis=1)
            t_far = np.nanmin(np.maximum(t1, t2), axis=1)
            on_box = (t_near <= t_far) & (t_near > 0) & (t_near < t_hit)
        t_hit[on_box] = t_near[on_box]
        rgb[on_box] = s.box_rgb
        depth = np.where(np.isfinite(t_hit), t_hit, 0.0)
        shape = (self.camera.height, self.camera.width)
        return depth.reshape(shape), rgb.reshape(*shape, 3)

    def color_image(self) -> RawImage:
        """bgra8 with ``row_padding_bytes`` of padding per row."""
        h, w = self.rgb.shape[:2]
        step = w * 4 + self.row_padding_bytes
        rows = np.zeros((h, step), dtype=np.uint8)
        px = rows[:, : w * 4].reshape(h, w, 4)
        px[..., 0], px[..., 1], px[..., 2], px[..., 3] = (
            self.rgb[..., 2], self.rgb[..., 1], self.rgb[..., 0], 255)
        return RawImage(h, w, "bgra8", step, rows.tobytes())

    def depth_image(self) -> RawImage:
        """16UC1 millimetres (0 = no return), little-endian, with row padding."""
        h, w = self.depth_m.shape
        step = w * 2 + self.row_padding_bytes
        rows = np.zeros((h, step), dtype=np.uint8)
        mm = np.clip(np.round(self.depth_m * 1000.0), 0, 65535).astype("<u2")
        rows[:, : w * 2] = mm.view(np.uint8).reshape(h, w * 2)
        return RawImage(h, w, "16UC1", step, rows.tobytes())
