"""Kinect-like RGB-D camera for the MuJoCo scene.

Produces what the Azure Kinect ROS driver publishes: colour as ``bgra8`` and
depth registered to colour as ``16UC1`` millimetres (0 = no return), plus a
``CameraModel`` whose pinhole K is exactly the render's projection, and the
optical frame pose (x right, y down, z forward) in ``base_link``.

One ``mjr_render`` per frame yields both images: colour and depth buffers are
read from the same pass. (``mujoco.Renderer`` renders once per mode and turns
on segmentation colours for depth, so RGB-D through it costs two passes.)

Depth facts verified for MuJoCo 4.0 (see test/sim/test_camera.py): with
``readDepthMap = mjDEPTH_ZEROFAR`` (what ``mujoco.Renderer`` sets) the depth
buffer holds reversed Z in [0, 1], 1 at the near plane, 0 at the far plane, and
the metric depth ALONG THE OPTICAL AXIS (not along the ray) is
``z = n f / (n + raw (f - n))`` with ``n = znear * extent``, ``f = zfar * extent``.
``mujoco.Renderer.enable_depth_rendering`` returns the same metric z (its
c/d-coefficient form is algebraically this formula); pixels showing nothing
come back as ``f``.

Projection: MuJoCo's fixed camera has a vertical field of view ``fovy`` and
square pixels; OpenGL pixel ``(u, v)`` covers ``[u, u + 1)`` so its centre is at
``u + 0.5``, i.e. with ROS's integer pixel centres ``cx = W/2 - 0.5``,
``cy = H/2 - 0.5`` and ``fx = fy = (H/2) / tan(fovy/2)``.
"""

from __future__ import annotations

import contextlib
import dataclasses

import cv2
import mujoco
import numpy as np
import transforms3d

from diffusion_policy_ros.perception.geometry import CameraModel, RigidTransform
from diffusion_policy_ros.perception.image_decoding import RawImage

CAMERA_NAME = "kinect"
#: 16:9 like the Kinect colour camera. At 320x180 the sync node uses every pixel, as many
#: as every second one of 640x360 (its auto stride keeps the points about a voxel apart),
#: for a quarter of the drawing, transport and decoding (docs/explanation/distillation.md, "a
#: quarter of
#: the pixels"); the shipped policy was trained at 640x360.
DEFAULT_RESOLUTION = (320, 180)
#: As wide as the Kinect's narrow-field depth image, the pixel pitch DepthNoise is set in.
FINE_RESOLUTION = (640, 360)
HD_RESOLUTION = (1280, 720)
#: MuJoCo camera axes (x right, y up, looking along -z) -> optical axes (y down, z forward).
_MJ_TO_OPTICAL = np.diag([1.0, -1.0, -1.0])


@dataclasses.dataclass(frozen=True)
class DepthNoise:
    """Time-of-flight-like depth corruption (illustrative magnitudes, all seeded).

    - Gaussian noise with ``sigma = sigma_base_m + sigma_per_m2 * z^2``: ToF phase
      noise grows as the returned amplitude falls off with distance.
    - ``dropout_prob``: isolated pixels without a return (multipath, low IR albedo).
    - ``edge_jump_m``: pixels within ``edge_band_sensor_px`` of a depth discontinuity
      larger than this become invalid, as the Kinect driver invalidates mixed ("flying")
      pixels.
    Azure Kinect's spec: random error std <= 17 mm, systematic < 11 mm + 0.1 % z.

    The band is a property of the depth sensor, so it is set in pixels of a
    ``sensor_width_px``-wide depth image and scaled to the rendered width: the share of
    an object it takes does not depend on the render resolution. A band narrower than a
    rendered pixel invalidates that pixel with the covered fraction as probability, as
    sampling one sensor pixel inside it would. Dropouts are per pixel, which needs no
    scaling. The jump test compares neighbouring rendered pixels, so a coarse render
    also flags surfaces seen at a grazing angle (the floor far behind the table).
    """

    sigma_base_m: float = 0.001
    sigma_per_m2: float = 0.0015
    dropout_prob: float = 0.005
    edge_jump_m: float = 0.03
    edge_band_sensor_px: float = 1.0
    #: Azure Kinect narrow-field unbinned depth: 640x576.
    sensor_width_px: int = 640

    def edge_band_px(self, image_width_px: int) -> float:
        """Invalid band on each side of a depth jump, in pixels of the rendered image."""
        return self.edge_band_sensor_px * image_width_px / self.sensor_width_px

    def apply(self, depth_m: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noisy copy of ``depth_m`` (float32, invalid = 0)."""
        z = depth_m.astype(np.float32, copy=True)
        valid = z > 0.0
        sigma = self.sigma_base_m + self.sigma_per_m2 * z * z
        z += (rng.standard_normal(z.shape, dtype=np.float32) * sigma).astype(np.float32)
        if self.edge_jump_m > 0.0:
            valid &= ~self._edge_band(depth_m, rng)
        if self.dropout_prob > 0.0:
            valid &= rng.random(z.shape) >= self.dropout_prob
        z[~valid] = 0.0
        return z

    def _edge_band(self, depth_m: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Pixels invalidated next to depth jumps: whole rings, then a partial one."""
        adjacent = np.zeros(depth_m.shape, dtype=bool)
        dv = np.abs(np.diff(depth_m, axis=0)) > self.edge_jump_m
        du = np.abs(np.diff(depth_m, axis=1)) > self.edge_jump_m
        adjacent[:-1] |= dv
        adjacent[1:] |= dv
        adjacent[:, :-1] |= du
        adjacent[:, 1:] |= du
        band_px = self.edge_band_px(depth_m.shape[1])
        whole_rings = int(np.floor(band_px))
        partial = band_px - whole_rings
        band = _grow(adjacent, whole_rings - 1) if whole_rings else np.zeros_like(adjacent)
        if partial > 0.0:
            ring = _grow(adjacent, whole_rings) & ~band
            band |= ring & (rng.random(depth_m.shape) < partial)
        return band


_CROSS = cv2.getStructuringElement(cv2.MORPH_CROSS, (3, 3))


def _grow(mask: np.ndarray, rings: int) -> np.ndarray:
    """``mask`` with ``rings`` 4-connected pixel rings added around it."""
    if rings <= 0:
        return mask.copy()
    return cv2.dilate(mask.view(np.uint8), _CROSS, iterations=rings).astype(bool)


def optical_rotation_to_mujoco_quat(rotation_optical: np.ndarray) -> np.ndarray:
    """MuJoCo camera quaternion (w, x, y, z) for an optical-frame rotation in its parent."""
    return transforms3d.quaternions.mat2quat(np.asarray(rotation_optical) @ _MJ_TO_OPTICAL)


def set_camera_pose(model: mujoco.MjModel, camera_to_base: RigidTransform,
                    camera_name: str = CAMERA_NAME) -> None:
    """Move a world-fixed camera so its optical frame is ``camera_to_base``."""
    cam = model.camera(camera_name)
    if model.cam_bodyid[cam.id] != 0:
        raise ValueError(f"camera '{camera_name}' is attached to a body; only world-fixed "
                         "cameras can be moved with set_camera_pose")
    model.cam_pos[cam.id] = camera_to_base.translation
    model.cam_quat[cam.id] = optical_rotation_to_mujoco_quat(camera_to_base.rotation)


def camera_model_for(model: mujoco.MjModel, width: int, height: int,
                     camera_name: str = CAMERA_NAME) -> CameraModel:
    """Pinhole intrinsics of the MuJoCo camera rendered at ``width`` x ``height``."""
    cam = model.camera(camera_name)
    if np.any(model.cam_sensorsize[cam.id] > 0):
        raise ValueError(f"camera '{camera_name}' uses sensorsize/focal intrinsics; "
                         "only fovy cameras are supported")
    f = float(0.5 * height / np.tan(np.deg2rad(model.cam_fovy[cam.id]) / 2.0))
    cx, cy = 0.5 * width - 0.5, 0.5 * height - 0.5
    return CameraModel(width, height, (f, 0.0, cx, 0.0, f, cy, 0.0, 0.0, 1.0),
                       "plumb_bob", (0.0, 0.0, 0.0, 0.0, 0.0))


@dataclasses.dataclass
class RgbdFrame:
    """One render: RGB ``(H, W, 3)`` uint8, optical-axis depth ``(H, W)`` float32 m (0 = none)."""

    rgb: np.ndarray
    depth_m: np.ndarray


class KinectCamera:
    """Offscreen renderer of one MuJoCo camera as a registered RGB-D sensor.

    Owns an OpenGL context (EGL/OSMesa per ``MUJOCO_GL``); it is made current on
    every render, so one camera may be used from any single thread at a time.
    Call ``close()`` (or use ``with``) to free the GL resources deterministically.
    """

    def __init__(self, model: mujoco.MjModel, width: int = DEFAULT_RESOLUTION[0],
                 height: int = DEFAULT_RESOLUTION[1], camera_name: str = CAMERA_NAME,
                 min_depth_m: float = 0.25, max_depth_m: float = 5.0,
                 depth_noise: DepthNoise | None = None, seed: int | None = None):
        self._gl = None
        if width > model.vis.global_.offwidth or height > model.vis.global_.offheight:
            raise ValueError(f"{width}x{height} exceeds the model's offscreen buffer "
                             f"{model.vis.global_.offwidth}x{model.vis.global_.offheight}")
        self.model = model
        self.width, self.height = int(width), int(height)
        self.camera_name = camera_name
        self._cam_id = model.camera(camera_name).id
        self.camera_model = camera_model_for(model, width, height, camera_name)
        self.min_depth_m, self.max_depth_m = float(min_depth_m), float(max_depth_m)
        self.depth_noise = depth_noise
        self._rng = np.random.default_rng(seed)
        extent = float(model.stat.extent)
        self.near_m = float(model.vis.map.znear) * extent
        self.far_m = float(model.vis.map.zfar) * extent

        self._gl = mujoco.GLContext(self.width, self.height)
        self._gl.make_current()
        self._ctx = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._ctx)
        self._ctx.readDepthMap = mujoco.mjtDepthMap.mjDEPTH_ZEROFAR
        self._scene = self.new_scene()
        self._option = mujoco.MjvOption()
        self._option.sitegroup[:] = 0  # sites are markers, not surfaces a Kinect sees
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._camera.fixedcamid = self._cam_id
        self._rect = mujoco.MjrRect(0, 0, self.width, self.height)
        self._rgb_gl = np.empty((self.height, self.width, 3), dtype=np.uint8)
        self._depth_gl = np.empty((self.height, self.width), dtype=np.float32)

    # -- geometry -----------------------------------------------------------------------
    def camera_to_base(self, data: mujoco.MjData | None = None) -> RigidTransform:
        """Optical frame in ``base_link`` (= MuJoCo world). With ``data``, the pose after
        its last ``mj_forward``/``mj_step`` (works for body-mounted cameras too)."""
        if data is not None:
            rot_mj = data.cam_xmat[self._cam_id].reshape(3, 3)
            pos = data.cam_xpos[self._cam_id]
        else:
            if self.model.cam_bodyid[self._cam_id] != 0:
                raise ValueError("a body-mounted camera's pose needs data")
            rot_mj = transforms3d.quaternions.quat2mat(self.model.cam_quat[self._cam_id])
            pos = self.model.cam_pos[self._cam_id]
        return RigidTransform(np.asarray(rot_mj) @ _MJ_TO_OPTICAL, np.array(pos, dtype=np.float64))

    # -- rendering ----------------------------------------------------------------------
    def new_scene(self) -> mujoco.MjvScene:
        """A scene buffer for ``capture`` / ``draw`` (shadows, reflections, sky, fog off)."""
        scene = mujoco.MjvScene(self.model, maxgeom=max(1000, 2 * self.model.ngeom))
        for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION,
                     mujoco.mjtRndFlag.mjRND_SKYBOX, mujoco.mjtRndFlag.mjRND_FOG,
                     mujoco.mjtRndFlag.mjRND_HAZE):
            scene.flags[flag] = False
        return scene

    def capture(self, data: mujoco.MjData, scene: mujoco.MjvScene) -> mujoco.MjvScene:
        """What the camera sees in ``data`` now, as geometry in ``scene`` (no GL: any thread).

        Split from ``draw`` so that a simulation loop can capture a frame at its instant
        and hand the drawing to another thread (``sim.render_thread``).
        """
        mujoco.mjv_updateScene(self.model, data, self._option, None, self._camera,
                               mujoco.mjtCatBit.mjCAT_ALL, scene)
        return scene

    def _draw_pass(self, scene: mujoco.MjvScene, read_depth: bool) -> None:
        assert self._gl is not None, "the camera is closed"
        self._gl.make_current()
        mujoco.mjr_render(self._rect, scene, self._ctx)
        mujoco.mjr_readPixels(self._rgb_gl, self._depth_gl if read_depth else None,
                              self._rect, self._ctx)

    def render_arrays(self, data: mujoco.MjData) -> RgbdFrame:
        """Render RGB and metric depth (top row first), with noise if configured."""
        return self.draw(self.capture(data, self._scene))

    def draw(self, scene: mujoco.MjvScene) -> RgbdFrame:
        """Draw a captured scene: RGB and metric depth (top row first), noise if configured.

        Uses this camera's GL context, which is made current here: one thread at a time.
        """
        self._draw_pass(scene, read_depth=True)
        n, f = self.near_m, self.far_m
        z = (n * f) / (n + self._depth_gl[::-1] * np.float32(f - n))
        # nothing rendered = far plane: never a valid return, whatever max_depth_m says
        z[(z < self.min_depth_m) | (z > min(self.max_depth_m, 0.999 * f))] = 0.0
        if self.depth_noise is not None:
            z = self.depth_noise.apply(z, self._rng)
        return RgbdFrame(np.ascontiguousarray(self._rgb_gl[::-1]), z.astype(np.float32))

    def render(self, data: mujoco.MjData) -> tuple[RawImage, RawImage]:
        """(``bgra8`` colour, ``16UC1`` depth in mm registered to colour) like the Kinect driver."""
        frame = self.render_arrays(data)
        return bgra8_image(frame.rgb), depth_16uc1_image(frame.depth_m)

    def render_segmentation(self, data: mujoco.MjData) -> np.ndarray:
        """``(H, W)`` int32 geom id seen at each pixel, -1 where nothing is."""
        flags = (mujoco.mjtRndFlag.mjRND_SEGMENT, mujoco.mjtRndFlag.mjRND_IDCOLOR)
        for flag in flags:
            self._scene.flags[flag] = True
        try:
            self._draw_pass(self.capture(data, self._scene), read_depth=False)
        finally:
            for flag in flags:
                self._scene.flags[flag] = False
        rgb = self._rgb_gl[::-1].astype(np.int32)
        segid = rgb[..., 0] + (rgb[..., 1] << 8) + (rgb[..., 2] << 16)
        lookup = np.full(self._scene.ngeom + 1, -1, dtype=np.int32)
        for g in self._scene.geoms[: self._scene.ngeom]:
            if g.segid >= 0 and g.objtype == mujoco.mjtObj.mjOBJ_GEOM:
                lookup[g.segid + 1] = g.objid
        return lookup[np.clip(segid, 0, self._scene.ngeom)]

    def close(self) -> None:
        if self._gl is not None:
            self._gl.make_current()
            self._ctx.free()
            self._gl.free()
            self._gl = None

    def __enter__(self) -> KinectCamera:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown may have torn GL down
            self.close()


def bgra8_image(rgb: np.ndarray) -> RawImage:
    """``bgra8`` RawImage (alpha 255) of an ``(H, W, 3)`` RGB array.

    OpenCV's conversion: the sim makes 30 of these a second, and a channel-reversing
    numpy copy costs many times more CPU (``python -m diffusion_policy_ros.bench.sim_core``:
    ``render_rgbd`` against ``render_arrays``)."""
    h, w = rgb.shape[:2]
    bgra = cv2.cvtColor(np.ascontiguousarray(rgb, dtype=np.uint8), cv2.COLOR_RGB2BGRA)
    return RawImage(h, w, "bgra8", 4 * w, bgra.tobytes())


def depth_16uc1_image(depth_m: np.ndarray) -> RawImage:
    """``16UC1`` millimetre RawImage (0 = invalid, rounded to the nearest mm)."""
    h, w = depth_m.shape
    mm = np.clip(np.rint(depth_m * 1000.0), 0, 65535).astype("<u2")
    return RawImage(h, w, "16UC1", 2 * w, mm.tobytes())
