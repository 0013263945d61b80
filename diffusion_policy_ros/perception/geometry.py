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
    with optical-axis depth z. With a workspace, only pixels whose ray can hit
    the box (by the box's projection onto the normalized image plane) are kept.
    """

    rows: np.ndarray
    cols: np.ndarray
    rays: np.ndarray
    origin: np.ndarray

    @classmethod
    def build(cls, camera: CameraModel, camera_to_base: RigidTransform, stride: int,
              workspace: Workspace | None = None) -> PixelRays:
        v, u = np.mgrid[0: camera.height: stride, 0: camera.width: stride]
        rows, cols = v.ravel(), u.ravel()
        xy = undistorted_normalized(camera, cols, rows)
        if workspace is not None:
            keep = _rays_towards_box(xy, camera_to_base, workspace)
            rows, cols, xy = rows[keep], cols[keep], xy[keep]
        rays_cam = np.concatenate([xy, np.ones((xy.shape[0], 1))], axis=1)
        rays = (rays_cam @ camera_to_base.rotation.T).astype(np.float32)
        return cls(rows.astype(np.intp), cols.astype(np.intp), rays,
                   camera_to_base.translation.astype(np.float32))

    def points(self, z_m: np.ndarray, index: np.ndarray) -> np.ndarray:
        """``(n, 3)`` float32 points in ``base_link`` for depths ``z_m`` at pixels ``index``."""
        return z_m[:, None] * self.rays[index] + self.origin


def _rays_towards_box(xy: np.ndarray, camera_to_base: RigidTransform,
                      workspace: Workspace) -> np.ndarray:
    """Mask of normalized coordinates inside the box's projected bounding rectangle.

    Conservative (a superset of the pixels that see the box). If a box corner
    is at or behind the camera plane the projection is unbounded, so every
    pixel is kept.
    """
    corners_cam = camera_to_base.inverse().apply(workspace.corners())
    if np.any(corners_cam[:, 2] <= 1e-6):
        return np.ones(xy.shape[0], dtype=bool)
    proj = corners_cam[:, :2] / corners_cam[:, 2:3]
    lo, hi = proj.min(axis=0), proj.max(axis=0)
    return np.all((xy >= lo) & (xy <= hi), axis=1)
