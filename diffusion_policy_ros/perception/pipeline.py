"""RGB-D frame -> policy observation (image + fixed-size point cloud in base_link).

The work is kept in the image domain: only pixels on a strided grid whose
rays can hit the workspace box are decoded and back-projected (rays are
precomputed per camera_info), then the points are cropped to the box,
voxel-downsampled and sampled to exactly ``num_points``.
"""

from __future__ import annotations

import dataclasses
import math
import time

import cv2
import numpy as np

from diffusion_policy_ros.config import param
from diffusion_policy_ros.perception.geometry import (
    CameraModel,
    PixelRays,
    RigidTransform,
    Workspace,
)
from diffusion_policy_ros.perception.image_decoding import (
    FrameRejected,
    RawImage,
    color_view,
    depth_to_metres,
    depth_view,
)
from diffusion_policy_ros.perception.sampling import (
    SAMPLERS,
    VoxelGrid,
    fixed_count_indices,
    load_fps_backend,
)


@dataclasses.dataclass
class RgbdSyncConfig:
    """Parameters of ``rgbd_sync_node`` (``config/rgbd_sync.yaml``)."""

    max_skew_s: float = param(0.010, "Largest |depth stamp - colour stamp| paired (s)",
                              low=0.0, high=0.1)
    max_age_s: float = param(0.5, "Frames older than this behind the newest stamp are dropped (s)",
                             low=0.01, high=10.0)
    clock_jump_s: float = param(1.0, "A backwards stamp jump larger than this restarts the "
                                "buffer (bag loop, sim reset) (s)", low=0.02, high=3600.0)
    buffer_capacity: int = param(30, "Frames kept pending per stream", low=1, high=1000)
    min_depth_m: float = param(0.25, "Depth below this is invalid (m); Kinect NFOV minimum 0.25",
                               low=0.0, high=20.0)
    max_depth_m: float = param(3.0, "Depth above this is invalid (m)", low=0.01, high=20.0)
    camera_translation: list = param(
        [1.25, 0.0, 0.80], "Camera optical frame origin in base_link [x, y, z] (m)",
        low=-100.0, high=100.0, name="camera_to_base.translation")
    camera_rotation_xyzw: list = param(
        [-0.653281, -0.653281, 0.270598, 0.270598],
        "Camera optical frame orientation in base_link as quaternion [x, y, z, w]",
        low=-1.0, high=1.0, name="camera_to_base.rotation_xyzw")
    workspace_min: list = param([0.15, -0.45, 0.012], "Workspace box minimum [x, y, z] in "
                                "base_link (m); z clear of the table top's depth noise",
                                low=-100.0, high=100.0)
    workspace_max: list = param([0.85, 0.45, 0.50], "Workspace box maximum [x, y, z] in "
                                "base_link (m)", low=-100.0, high=100.0)
    voxel_size_m: float = param(0.01, "Voxel edge for downsampling (m)", low=0.001, high=0.2)
    num_points: int = param(1024, "Points per observation (padded when fewer are valid)",
                            low=1, high=65536)
    sampler: str = param("fps", "Voxel points -> num_points: fps (farthest point) | uniform "
                         "(seeded random subset)", choices=SAMPLERS)
    pixel_stride: int = param(0, "Use every n-th pixel row/column; 0 = auto (finest stride "
                              "needed for voxel_size_m at the far workspace corner)",
                              low=0, high=32)
    image_size: list = param([128, 128], "Policy image [height, width] (px), centre crop to "
                             "this aspect then resize", low=8, high=4096)
    output_rate_hz: float = param(10.0, "Observations per second made from the synchronised "
                                  "pairs, picked on their stamps (Hz): policy_node's rate_hz, "
                                  "the only ones it uses; 0 = every pair", low=0.0,
                                  high=1000.0)
    full_cloud_rate_hz: float = param(5.0, "Rate of camera/points for rviz (Hz); 0 = off",
                                      low=0.0, high=30.0)
    full_cloud_stride: int = param(4, "Pixel stride of camera/points", low=1, high=32)
    base_frame: str = param("base_link", "Frame of observation/points and camera/points")
    sensor_qos_reliability: str = param(
        "reliable", "QoS reliability of the camera subscriptions (a reliable subscription "
        "cannot match a best-effort publisher)", choices=("reliable", "best_effort"))
    diagnostics_period_s: float = param(1.0, "Period of /diagnostics (wall clock, s)",
                                        low=0.05, high=60.0)

    def validate(self) -> None:
        if self.min_depth_m >= self.max_depth_m:
            raise ValueError(f"min_depth_m {self.min_depth_m} must be < max_depth_m "
                             f"{self.max_depth_m}")
        if any(lo >= hi for lo, hi in zip(self.workspace_min, self.workspace_max, strict=True)):
            raise ValueError(f"workspace_min {self.workspace_min} must be < workspace_max "
                             f"{self.workspace_max} on every axis")
        RigidTransform.from_xyz_quat_xyzw(self.camera_translation, self.camera_rotation_xyzw)

    def camera_to_base(self) -> RigidTransform:
        return RigidTransform.from_xyz_quat_xyzw(self.camera_translation, self.camera_rotation_xyzw)

    def workspace(self) -> Workspace:
        return Workspace(np.asarray(self.workspace_min, dtype=np.float32),
                         np.asarray(self.workspace_max, dtype=np.float32))


@dataclasses.dataclass
class Observation:
    """One synchronized policy observation."""

    image_rgb: np.ndarray | None
    """``image_size`` uint8 RGB; None from ``process(..., with_image=False)``."""
    points: np.ndarray
    """``(num_points, 3)`` float32 in the base frame (m)."""
    colors: np.ndarray
    """``(num_points, 3)`` uint8 RGB of each point."""
    num_valid: int
    """Distinct voxel points before sampling/padding."""
    num_padded: int
    invalid_depth_fraction: float
    """Share of workspace-facing pixels without valid depth (0, NaN, inf, out of range)."""
    stage_times_s: dict[str, float]


class RgbdObservationPipeline:
    """Turns a synchronized colour + depth pair into an ``Observation``."""

    def __init__(self, config: RgbdSyncConfig):
        config.validate()
        self.config = config
        self.camera_to_base = config.camera_to_base()
        self.workspace = config.workspace()
        self.voxels = VoxelGrid(self.workspace.min_xyz, self.workspace.max_xyz, config.voxel_size_m)
        self.camera: CameraModel | None = None
        self.stride = 1
        self._roi_rays: PixelRays | None = None
        self._full_rays: PixelRays | None = None
        if config.sampler == "fps":
            load_fps_backend()

    def set_camera(self, camera: CameraModel) -> list[str]:
        """Adopt new intrinsics (raises ``FrameRejected``); returns warnings to log once."""
        if camera == self.camera:
            return []
        camera.validate()
        warnings = []
        if not camera.undistorts_exactly():
            warnings.append(f"camera_info distortion model '{camera.distortion_model}' with "
                            f"non-zero D={list(camera.d)} is not supported; points are "
                            "back-projected as undistorted pinhole and will be wrong towards "
                            "the image borders")
        self.camera = camera
        self.stride = self.config.pixel_stride or self._auto_stride(camera)
        self._roi_rays = PixelRays.build(camera, self.camera_to_base, self.stride, self.workspace)
        self._full_rays = None
        return warnings

    def _auto_stride(self, camera: CameraModel) -> int:
        """Largest stride whose pixel spacing stays under one voxel at the far corner."""
        corners = self.camera_to_base.inverse().apply(self.workspace.corners())
        z_far = float(np.clip(corners[:, 2].max(), self.config.min_depth_m,
                              self.config.max_depth_m))
        focal = min(camera.fx, camera.fy)
        return max(1, math.floor(self.config.voxel_size_m * focal / z_far))

    def _check_pair(self, color: RawImage, depth: RawImage) -> CameraModel:
        camera = self._check_camera()
        if (color.height, color.width) != (depth.height, depth.width):
            raise FrameRejected("size_mismatch", f"colour {color.width}x{color.height} and depth "
                                f"{depth.width}x{depth.height} differ (depth must be registered "
                                "to colour)")
        self._check_size(color, camera)
        return camera

    def _check_camera(self) -> CameraModel:
        if self.camera is None:
            raise FrameRejected("no_camera_info", "no camera_info received yet")
        return self.camera

    def _check_size(self, color: RawImage, camera: CameraModel) -> None:
        if (color.height, color.width) != (camera.height, camera.width):
            raise FrameRejected("camera_info_size_mismatch", f"image {color.width}x{color.height} "
                                f"but camera_info {camera.width}x{camera.height}")

    def image_of(self, color: RawImage) -> np.ndarray:
        """The policy image of a colour frame alone (``process`` makes the same one), for
        a node that publishes it while the frame's depth is still on its way; raises
        ``FrameRejected`` without camera_info or when the sizes disagree."""
        self._check_size(color, self._check_camera())
        return self.policy_image(*color_view(color))

    def process(self, color: RawImage, depth: RawImage, with_image: bool = True) -> Observation:
        """The observation of one frame; raises ``FrameRejected`` for unusable input.
        ``with_image`` False: the points only (``image_of`` made the image already)."""
        t0 = time.perf_counter()
        self._check_pair(color, depth)
        color_px, rgb_order = color_view(color)
        depth_px, units_per_m = depth_view(depth)
        t1 = time.perf_counter()
        rays = self._roi_rays
        assert rays is not None  # built with the camera
        z = depth_to_metres(depth_px[rays.rows, rays.cols], units_per_m,
                            self.config.min_depth_m, self.config.max_depth_m)
        num_valid = int(np.count_nonzero(~np.isnan(z)))
        pixel_index = np.flatnonzero(rays.inside(z))
        points = rays.points(z[pixel_index], pixel_index)
        t2 = time.perf_counter()
        if points.shape[0] == 0:
            raise FrameRejected("empty_workspace", "no valid depth inside the workspace box "
                                f"{self.workspace.min_xyz.tolist()}..{self.workspace.max_xyz.tolist()}")
        kept = self.voxels.downsample(points)
        chosen, padded = fixed_count_indices(points[kept], self.config.num_points,
                                             self.config.sampler, self.config.voxel_size_m)
        sel = kept[chosen]
        pix = pixel_index[sel]
        colors = color_px[rays.rows[pix], rays.cols[pix]][:, list(rgb_order)]
        t3 = time.perf_counter()
        image = self.policy_image(color_px, rgb_order) if with_image else None
        t4 = time.perf_counter()
        return Observation(
            image_rgb=image, points=np.ascontiguousarray(points[sel]), colors=colors,
            num_valid=int(kept.size), num_padded=padded,
            invalid_depth_fraction=1.0 - num_valid / max(1, z.size),
            stage_times_s={"decode": t1 - t0, "backproject_crop": t2 - t1,
                           "downsample": t3 - t2, "image": t4 - t3, "total": t4 - t0})

    def policy_image(self, color_px: np.ndarray, rgb_order: tuple[int, int, int]) -> np.ndarray:
        """Centre crop to the ``image_size`` aspect ratio, area-resize, reorder to RGB."""
        out_h, out_w = self.config.image_size
        h, w = color_px.shape[:2]
        crop_w = min(w, round(h * out_w / out_h))
        crop_h = min(h, round(crop_w * out_h / out_w))
        y0, x0 = (h - crop_h) // 2, (w - crop_w) // 2
        crop = color_px[y0: y0 + crop_h, x0: x0 + crop_w]
        small = cv2.resize(crop, (out_w, out_h), interpolation=cv2.INTER_AREA)
        return np.ascontiguousarray(small[:, :, list(rgb_order)])

    def full_cloud(self, color: RawImage, depth: RawImage) -> tuple[np.ndarray, np.ndarray]:
        """(points in the base frame, uint8 RGB) of every valid pixel on the full-cloud stride."""
        camera = self._check_pair(color, depth)
        if self._full_rays is None:
            self._full_rays = PixelRays.build(camera, self.camera_to_base,
                                              self.config.full_cloud_stride)
        rays = self._full_rays
        color_px, rgb_order = color_view(color)
        depth_px, units_per_m = depth_view(depth)
        z = depth_to_metres(depth_px[rays.rows, rays.cols], units_per_m,
                            self.config.min_depth_m, self.config.max_depth_m)
        valid = np.flatnonzero(~np.isnan(z))
        colors = color_px[rays.rows[valid], rays.cols[valid]][:, list(rgb_order)]
        return rays.points(z[valid], valid), colors
