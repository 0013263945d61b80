"""Camera geometry: intrinsics, undistorted pixel rays, rigid transforms, workspace crops.

Back-projection is done with rays precomputed once per (camera_info,
extrinsics, pixel grid): a point is ``t + z * ray_base`` where ``ray_base`` is
the undistorted pixel ray rotated into ``base_link`` and ``z`` is the depth
along the optical axis (what the Kinect reports). Per frame this is one
multiply-add per point, and lens distortion costs nothing at run time.
"""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np
import transforms3d

from diffusion_policy_ros.perception.image_decoding import FrameRejected

#: sensor_msgs/CameraInfo distortion models we undistort exactly.
PINHOLE_MODELS = ("plumb_bob", "rational_polynomial")


@dataclasses.dataclass(frozen=True)
class CameraModel:
    """Intrinsics from sensor_msgs/CameraInfo (K row-major, D with its model name)."""

    width: int
    height: int
    k: tuple[float, ...]
    distortion_model: str = ""
    d: tuple[float, ...] = ()

    @property
    def fx(self) -> float:
        return self.k[0]

    @property
    def fy(self) -> float:
        return self.k[4]

    @property
    def cx(self) -> float:
        return self.k[2]

    @property
    def cy(self) -> float:
        return self.k[5]

    def matrix(self) -> np.ndarray:
        return np.asarray(self.k, dtype=np.float64).reshape(3, 3)

    def has_distortion(self) -> bool:
        return any(abs(c) > 0.0 for c in self.d)

    def validate(self) -> None:
        """Raise ``FrameRejected`` for intrinsics that cannot back-project."""
        if len(self.k) != 9 or not np.all(np.isfinite(self.k)):
            raise FrameRejected("bad_camera_info", "camera_info K must hold 9 finite values")
        if self.fx <= 0.0 or self.fy <= 0.0:
            raise FrameRejected("bad_camera_info", f"camera_info K has fx={self.fx}, fy={self.fy} "
                                "(all zeros means the camera is not calibrated)")
        if self.width <= 0 or self.height <= 0:
            raise FrameRejected("bad_camera_info",
                                f"camera_info size is {self.width}x{self.height}")
        if not np.all(np.isfinite(self.d)):
            raise FrameRejected("bad_camera_info", "camera_info D holds NaN/inf")

    def undistorts_exactly(self) -> bool:
        """False when D is non-zero but its model is one we cannot invert."""
        return not self.has_distortion() or self.distortion_model in PINHOLE_MODELS


@dataclasses.dataclass(frozen=True)
class RigidTransform:
    """``p_parent = rotation @ p_child + translation``."""

    rotation: np.ndarray
    translation: np.ndarray

    @classmethod
    def from_xyz_quat_xyzw(cls, translation, quat_xyzw) -> RigidTransform:
        q = np.asarray(quat_xyzw, dtype=np.float64)
        norm = np.linalg.norm(q)
        if q.shape != (4,) or not np.isfinite(norm) or norm < 1e-9:
            raise ValueError(f"rotation quaternion [x, y, z, w] must be non-zero, got {quat_xyzw}")
        x, y, z, w = q / norm
        rot = transforms3d.quaternions.quat2mat([w, x, y, z])
        return cls(rot, np.asarray(translation, dtype=np.float64).reshape(3))

    def inverse(self) -> RigidTransform:
        rt = self.rotation.T
        return RigidTransform(rt, -rt @ self.translation)

    def apply(self, points: np.ndarray) -> np.ndarray:
        return points @ self.rotation.T + self.translation

    def matrix(self) -> np.ndarray:
        m = np.eye(4)
        m[:3, :3] = self.rotation
        m[:3, 3] = self.translation
        return m


def undistorted_normalized(camera: CameraModel, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``(n, 2)`` normalized image coordinates ``(x/z, y/z)`` of pixels ``(u, v)``.

    Inverts plumb_bob / rational_polynomial distortion with OpenCV's iterative
    solver (run once per camera_info, never per frame).
    """
    uv = np.stack([u, v], axis=-1).astype(np.float64).reshape(-1, 1, 2)
    if camera.has_distortion() and camera.undistorts_exactly():
        criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 50, 1e-10)
        xy = cv2.undistortPoints(uv, camera.matrix(), np.asarray(camera.d, dtype=np.float64),
                                 R=None, P=None, criteria=criteria)
        return xy.reshape(-1, 2)
    x = (uv[:, 0, 0] - camera.cx) / camera.fx
    y = (uv[:, 0, 1] - camera.cy) / camera.fy
    return np.stack([x, y], axis=-1)


def depth_to_points(depth_m: np.ndarray, camera: CameraModel) -> np.ndarray:
    """``(H*W, 3)`` points in the camera optical frame for every pixel (NaN where invalid).

    The straightforward full-image reference; the pipeline uses ``PixelRays``.
    """
    v, u = np.mgrid[0: depth_m.shape[0], 0: depth_m.shape[1]]
    xy = undistorted_normalized(camera, u.ravel(), v.ravel())
    z = depth_m.reshape(-1).astype(np.float64)
    return np.stack([xy[:, 0] * z, xy[:, 1] * z, z], axis=-1)


@dataclasses.dataclass(frozen=True)
class Workspace:
    """Axis-aligned box in ``base_link`` (metres)."""

    min_xyz: np.ndarray
    max_xyz: np.ndarray

    def contains(self, points: np.ndarray) -> np.ndarray:
        return np.all((points >= self.min_xyz) & (points <= self.max_xyz), axis=-1)

    def corners(self) -> np.ndarray:
        lo, hi = self.min_xyz, self.max_xyz
        return np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1])
                         for z in (lo[2], hi[2])])


@dataclasses.dataclass(frozen=True)
class PixelRays:
    """Precomputed rays in ``base_link`` for a strided grid of pixels.

    ``rows``/``cols`` index the image, ``rays`` is ``(n, 3)`` float32 so that
    ``camera_to_base.translation + z * rays[i]`` is the point seen at pixel i
    with optical-axis depth z. With a workspace, only pixels whose ray crosses the
    box are kept, and ``z_range_m[i]`` is the depth interval over which ray i is
    inside it (the intersection of its three slabs), so ``inside(z)`` selects the
    in-box pixels of a frame by two comparisons per pixel, before any point is made.
    """

    rows: np.ndarray
    cols: np.ndarray
    rays: np.ndarray
    origin: np.ndarray
    z_range_m: np.ndarray | None = None

    @classmethod
    def build(cls, camera: CameraModel, camera_to_base: RigidTransform, stride: int,
              workspace: Workspace | None = None) -> PixelRays:
        v, u = np.mgrid[0: camera.height: stride, 0: camera.width: stride]
        rows, cols = v.ravel(), u.ravel()
        xy = undistorted_normalized(camera, cols, rows)
        rays_cam = np.concatenate([xy, np.ones((xy.shape[0], 1))], axis=1)
        rays = (rays_cam @ camera_to_base.rotation.T).astype(np.float32)
        origin = camera_to_base.translation.astype(np.float32)
        z_range = None
        if workspace is not None:
            z_range = _depths_inside_box(rays, origin, workspace)
            keep = z_range[:, 0] <= z_range[:, 1]
            rows, cols, rays, z_range = rows[keep], cols[keep], rays[keep], z_range[keep]
        return cls(rows.astype(np.intp), cols.astype(np.intp), rays, origin, z_range)

    def points(self, z_m: np.ndarray, index: np.ndarray) -> np.ndarray:
        """``(n, 3)`` float32 points in ``base_link`` for depths ``z_m`` at pixels ``index``."""
        return z_m[:, None] * self.rays[index] + self.origin

    def inside(self, z_m: np.ndarray) -> np.ndarray:
        """Mask of the pixels whose depth ``z_m`` (NaN: none) puts their point in the box."""
        assert self.z_range_m is not None, "rays built without a workspace"
        with np.errstate(invalid="ignore"):
            return (z_m >= self.z_range_m[:, 0]) & (z_m <= self.z_range_m[:, 1])


def _depths_inside_box(rays: np.ndarray, origin: np.ndarray,
                       workspace: Workspace) -> np.ndarray:
    """``(n, 2)`` [near, far] optical-axis depths (m, float64) over which
    ``origin + z * rays[i]`` lies in the box; near > far where it never does.

    Per axis the point is inside for z between (lo - o) / d and (hi - o) / d; a ray
    parallel to an axis's faces is inside for every z or none.
    """
    d = rays.astype(np.float64)
    o = origin.astype(np.float64)
    near = np.zeros(d.shape[0])
    far = np.full(d.shape[0], np.inf)
    for axis in range(3):
        da = d[:, axis]
        lo = workspace.min_xyz[axis] - o[axis]
        hi = workspace.max_xyz[axis] - o[axis]
        moving = np.abs(da) > 1e-12
        with np.errstate(divide="ignore", invalid="ignore"):
            a, b = lo / da, hi / da
        near = np.where(moving, np.maximum(near, np.minimum(a, b)), near)
        far = np.where(moving, np.minimum(far, np.maximum(a, b)), far)
        if not lo <= 0.0 <= hi:  # the origin is outside this slab: parallel rays miss it
            far = np.where(moving, far, -np.inf)
    return np.stack([near, far], axis=1)
