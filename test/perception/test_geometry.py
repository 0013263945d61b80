import cv2
import numpy as np
import open3d as o3d
import pytest
import transforms3d

from diffusion_policy_ros.perception.geometry import (
    CameraModel,
    PixelRays,
    RigidTransform,
    Workspace,
    depth_to_points,
    undistorted_normalized,
)
from diffusion_policy_ros.perception.image_decoding import FrameRejected
from diffusion_policy_ros.perception.synthetic_scene import KINECT_720P

PINHOLE = CameraModel(64, 48, (50.0, 0.0, 31.5, 0.0, 52.0, 23.5, 0.0, 0.0, 1.0))


def test_back_projection_matches_open3d_within_1e5_m():
    rng = np.random.default_rng(1)
    depth_mm = rng.integers(300, 2500, size=(48, 64)).astype(np.uint16)
    ours = depth_to_points(depth_mm.astype(np.float32) / 1000.0, PINHOLE)
    intr = o3d.camera.PinholeCameraIntrinsic(64, 48, PINHOLE.fx, PINHOLE.fy, PINHOLE.cx, PINHOLE.cy)
    cloud = o3d.geometry.PointCloud.create_from_depth_image(
        o3d.geometry.Image(depth_mm), intr, depth_scale=1000.0, depth_trunc=10.0, stride=1)
    ref = np.asarray(cloud.points)
    assert ref.shape == ours.shape
    np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_undistorted_rays_reproject_to_their_pixels_for_kinect_rational_model():
    v, u = np.mgrid[0:720:9, 0:1280:9]
    xy = undistorted_normalized(KINECT_720P, u.ravel(), v.ravel())
    rays = np.concatenate([xy, np.ones((xy.shape[0], 1))], axis=1)
    uv, _ = cv2.projectPoints(rays, np.zeros(3), np.zeros(3), KINECT_720P.matrix(),
                              np.asarray(KINECT_720P.d))
    err = np.abs(uv.reshape(-1, 2) - np.stack([u.ravel(), v.ravel()], axis=1))
    assert err.max() < 1e-3


def test_points_by_hand_from_k():
    depth = np.full((48, 64), np.nan, dtype=np.float32)
    depth[10, 20] = 1.5
    p = depth_to_points(depth, PINHOLE).reshape(48, 64, 3)[10, 20]
    np.testing.assert_allclose(p, [(20 - 31.5) / 50.0 * 1.5, (10 - 23.5) / 52.0 * 1.5, 1.5])


def test_rigid_transform_quaternion_and_inverse():
    q_wxyz = transforms3d.euler.euler2quat(0.3, -0.7, 1.1)
    quat_xyzw = [q_wxyz[1], q_wxyz[2], q_wxyz[3], q_wxyz[0]]
    tf = RigidTransform.from_xyz_quat_xyzw([0.1, -0.2, 0.9], quat_xyzw)
    np.testing.assert_allclose(tf.rotation, transforms3d.euler.euler2mat(0.3, -0.7, 1.1))
    pts = np.random.default_rng(2).normal(size=(10, 3))
    np.testing.assert_allclose(tf.inverse().apply(tf.apply(pts)), pts, atol=1e-12)
    with pytest.raises(ValueError):
        RigidTransform.from_xyz_quat_xyzw([0, 0, 0], [0, 0, 0, 0])


def test_pixel_rays_equal_transformed_back_projection_and_roi_keeps_every_workspace_point():
    tf = RigidTransform.from_xyz_quat_xyzw([1.25, 0.0, 0.8],
                                           [-0.653281, -0.653281, 0.270598, 0.270598])
    cam = CameraModel(160, 120, (120.0, 0.0, 79.5, 0.0, 120.0, 59.5, 0.0, 0.0, 1.0),
                      "plumb_bob", (0.1, -0.05, 0.001, 0.0, 0.01))
    depth = np.random.default_rng(3).uniform(0.4, 2.0, size=(120, 160)).astype(np.float32)
    reference = tf.apply(depth_to_points(depth, cam))
    full = PixelRays.build(cam, tf, stride=1)
    ours = full.points(depth[full.rows, full.cols], np.arange(full.rows.size))
    np.testing.assert_allclose(ours, reference, atol=1e-5)

    box = Workspace(np.array([0.3, -0.2, 0.0]), np.array([0.7, 0.2, 0.3]))
    roi = PixelRays.build(cam, tf, stride=1, workspace=box)
    assert roi.rows.size < full.rows.size
    in_box_full = {(r, c) for r, c, p in zip(full.rows, full.cols, ours, strict=True)
                   if box.contains(p[None])[0]}
    roi_pixels = set(zip(roi.rows.tolist(), roi.cols.tolist(), strict=True))
    assert in_box_full and in_box_full <= roi_pixels

    # inside(z): the pixels whose point is in the box, by depth intervals alone
    z = depth[roi.rows, roi.cols].copy()
    z[::7] = np.nan  # no return
    inside = roi.inside(z)
    index = np.arange(z.size)
    with np.errstate(invalid="ignore"):
        expected = box.contains(roi.points(z, index)) & ~np.isnan(z)
    np.testing.assert_array_equal(inside, expected)
    assert inside.any() and not inside.all()


def test_depth_intervals_are_the_ray_box_crossings():
    """A camera looking straight down from above the box's centre: the centre ray is in
    the box between the top and bottom faces; a ray that misses the box is dropped."""
    tf = RigidTransform.from_xyz_quat_xyzw([0.5, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0])  # z down
    cam = CameraModel(3, 3, (1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0))
    box = Workspace(np.array([0.3, -0.2, 0.1]), np.array([0.7, 0.2, 0.4]))
    roi = PixelRays.build(cam, tf, stride=1, workspace=box)
    centre = [(r, c) for r, c in zip(roi.rows, roi.cols, strict=True)].index((1, 1))
    np.testing.assert_allclose(roi.z_range_m[centre], [0.6, 0.9], atol=1e-6)
    # the corner rays (45 degrees) leave the 0.2 m half-width box above its top face
    assert (0, 0) not in set(zip(roi.rows.tolist(), roi.cols.tolist(), strict=True))


@pytest.mark.parametrize("k", [(0.0,) * 9, (np.nan,) + (1.0,) * 8, (-5.0, 0, 1, 0, 5, 1, 0, 0, 1)])
def test_uncalibrated_intrinsics_are_rejected(k):
    with pytest.raises(FrameRejected) as err:
        CameraModel(64, 48, k).validate()
    assert err.value.reason == "bad_camera_info"


def test_unknown_distortion_model_is_flagged():
    cam = CameraModel(64, 48, PINHOLE.k, "equidistant", (0.1, 0.0, 0.0, 0.0))
    assert not cam.undistorts_exactly()
    assert CameraModel(64, 48, PINHOLE.k, "equidistant", (0.0,) * 4).undistorts_exactly()
