"""The Kinect-like camera: metric depth, exact intrinsics, frames and encodings."""

import mujoco
import numpy as np
import pytest

from diffusion_policy_ros.perception.geometry import RigidTransform, Workspace, depth_to_points
from diffusion_policy_ros.perception.image_decoding import decode_color, decode_depth
from diffusion_policy_ros.perception.pipeline import RgbdSyncConfig
from diffusion_policy_ros.sim.camera import (
    DEFAULT_RESOLUTION,
    FINE_RESOLUTION,
    HD_RESOLUTION,
    DepthNoise,
    KinectCamera,
    camera_model_for,
    set_camera_pose,
)

CONFIG_TRANSLATION = [1.25, 0.0, 0.80]
CONFIG_QUAT_XYZW = [-0.653281, -0.653281, 0.270598, 0.270598]


@pytest.fixture
def camera(scene):
    scene.reset(seed=5)
    cam = KinectCamera(scene.model)
    yield cam
    cam.close()


def _pixel_rays_base(cam: KinectCamera, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Rays ``R [x_n, y_n, 1]`` (unnormalised: optical depth z gives the point) in base."""
    k = cam.camera_model
    xy1 = np.stack([(cols - k.cx) / k.fx, (rows - k.cy) / k.fy, np.ones(rows.size)], axis=1)
    return xy1 @ cam.camera_to_base().rotation.T


def test_extrinsics_match_the_rgbd_sync_config(scene, camera):
    expected = RigidTransform.from_xyz_quat_xyzw(CONFIG_TRANSLATION, CONFIG_QUAT_XYZW)
    np.testing.assert_allclose(camera.camera_to_base().translation, expected.translation)
    np.testing.assert_allclose(camera.camera_to_base().rotation, expected.rotation, atol=1e-6)
    # the pose MuJoCo computes in data (after mj_forward) agrees with the model's
    np.testing.assert_allclose(camera.camera_to_base(scene.data).rotation, expected.rotation,
                               atol=1e-6)
    np.testing.assert_allclose(camera.camera_to_base(scene.data).translation,
                               expected.translation, atol=1e-12)


def test_intrinsics_are_a_square_pixel_pinhole(scene):
    k = camera_model_for(scene.model, 640, 360)
    assert k.fx == pytest.approx(k.fy)
    assert (k.cx, k.cy) == (319.5, 179.5)
    assert k.fy == pytest.approx(180.0 / np.tan(np.deg2rad(59.0) / 2))
    hd = camera_model_for(scene.model, *HD_RESOLUTION)
    assert hd.fy == pytest.approx(2 * k.fy)
    k.validate()


def test_depth_matches_mj_ray_along_pixel_rays(scene, camera):
    frame = camera.render_arrays(scene.data)
    step = max(3, 7 * camera.width // 640)  # a ray every 7 px at 640 wide
    rows, cols = np.mgrid[2:camera.height:step, 3:camera.width:step]
    rows, cols = rows.ravel(), cols.ravel()
    rays = _pixel_rays_base(camera, rows, cols)
    norms = np.linalg.norm(rays, axis=1)
    unit = rays / norms[:, None]
    dist = np.zeros(rows.size)
    geom = np.zeros(rows.size, dtype=np.int32)
    origin = camera.camera_to_base().translation
    mujoco.mj_multiRay(scene.model, scene.data, origin, unit.ravel(), None, 1, -1, geom, dist,
                       None, rows.size, 100.0)
    z_ray = dist / norms  # distance along the ray -> depth along the optical axis
    z_render = frame.depth_m[rows, cols]
    both = (geom >= 0) & (z_render > 0) & (z_ray < camera.max_depth_m - 0.05)
    assert both.sum() > 0.6 * rows.size
    err = np.abs(z_render[both] - z_ray[both])
    # pixels on silhouette edges may see the other surface; everything else is exact
    assert np.mean(err < 0.002) > 0.995, np.sort(err)[-20:]
    assert np.median(err) < 2e-4
    # nothing hit (or beyond range) renders as "no return"
    assert np.all(frame.depth_m[rows, cols][geom < 0] == 0.0)
    # the robot, the table and several objects are among the surfaces checked
    names = {scene.model.geom(g).name for g in geom[both]}
    assert {"table_top", "red_cube", "blue_cube", "yellow_cylinder"} <= names


def test_depth_equals_mujoco_renderer(scene, camera):
    frame = camera.render_arrays(scene.data)
    with mujoco.Renderer(scene.model, camera.height, camera.width) as renderer:
        renderer.enable_depth_rendering()
        renderer.update_scene(scene.data, camera="kinect")
        z = renderer.render()
    valid = frame.depth_m > 0
    np.testing.assert_allclose(frame.depth_m[valid], z[valid], rtol=1e-5)
    # the Renderer reports pixels without a surface as the far plane
    assert np.all(z[~valid & (z > 9.9)] == pytest.approx(camera.far_m, rel=1e-5))


def _object_points(scene, obj) -> np.ndarray:
    """Points whose convex hull is the object's geom (box corners / cylinder rims)."""
    m, d = scene.model, scene.data
    size = m.geom_size[obj.geom_id]
    if m.geom_type[obj.geom_id] == mujoco.mjtGeom.mjGEOM_BOX:
        local = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
        local = local * size
    else:
        a = np.linspace(0, 2 * np.pi, 720, endpoint=False)
        rim = np.stack([size[0] * np.cos(a), size[0] * np.sin(a)], axis=1)
        local = np.concatenate([np.c_[rim, np.full(a.size, -size[1])],
                                np.c_[rim, np.full(a.size, size[1])]])
    rot = d.geom_xmat[obj.geom_id].reshape(3, 3)
    return local @ rot.T + d.geom_xpos[obj.geom_id]


def _project(cam: KinectCamera, points_base: np.ndarray) -> np.ndarray:
    p = cam.camera_to_base().inverse().apply(points_base)
    return (p[:, :2] / p[:, 2:3]) @ np.diag([cam.camera_model.fx, cam.camera_model.fy]) + [
        cam.camera_model.cx, cam.camera_model.cy]


@pytest.mark.parametrize("resolution", [(640, 360), HD_RESOLUTION])
def test_intrinsics_project_objects_onto_their_pixels(scene, resolution):
    checked = 0
    with KinectCamera(scene.model, *resolution) as cam:
        for seed in (1, 2, 3):
            scene.reset(seed=seed)
            seg = cam.render_segmentation(scene.data)
            rgb = cam.render_arrays(scene.data).rgb
            boxes = {o.name: _project(cam, _object_points(scene, o)) for o in scene.objects}
            boxes = {n: (uv.min(axis=0), uv.max(axis=0)) for n, uv in boxes.items()}
            for obj in scene.objects:
                # the centre site projects onto a pixel of that object
                u, v = np.rint(_project(cam, scene.data.site_xpos[[scene.model.site(
                    obj.name).id]])[0]).astype(int)
                assert seg[v, u] == obj.geom_id, (seed, obj.name)
                colour = rgb[v, u].astype(float)
                expected = scene.model.geom_rgba[obj.geom_id, :3]
                cos = colour @ expected / (np.linalg.norm(colour) * np.linalg.norm(expected))
                assert cos > 0.95, (obj.name, colour)
                lo, hi = boxes[obj.name]
                if any(np.all(lo <= b_hi) and np.all(b_lo <= hi)
                       for n, (b_lo, b_hi) in boxes.items() if n != obj.name):
                    continue  # possibly occluded by another object
                # silhouette bounding box = projected hull bounding box (pixel centres)
                vs, us = np.nonzero(seg == obj.geom_id)
                np.testing.assert_allclose([us.min(), vs.min()], np.ceil(lo - 0.5), atol=1)
                np.testing.assert_allclose([us.max(), vs.max()], np.floor(hi + 0.5), atol=1)
                checked += 1
    assert checked >= 6


def test_render_produces_kinect_encodings(scene, camera):
    colour, depth = camera.render(scene.data)
    frame = camera.render_arrays(scene.data)
    width, height = DEFAULT_RESOLUTION
    assert (colour.encoding, colour.step, colour.width, colour.height) == ("bgra8", 4 * width,
                                                                          width, height)
    assert (depth.encoding, depth.step) == ("16UC1", 2 * width)
    np.testing.assert_array_equal(decode_color(colour), frame.rgb)
    assert np.all(np.frombuffer(colour.data, np.uint8)[3::4] == 255)
    z = decode_depth(depth, min_depth_m=0.25)  # 0 = no return
    valid = frame.depth_m > 0
    np.testing.assert_array_equal(np.isnan(z), ~valid)
    assert np.abs(z[valid] - frame.depth_m[valid]).max() <= 0.0005 + 1e-6
    # the cloud back-projected with the published K lands on the table top / objects
    points = camera.camera_to_base().apply(depth_to_points(z, camera.camera_model))
    table = scene.model.geom("table_top").id
    seg = camera.render_segmentation(scene.data).ravel()
    top = points[(seg == table) & (points[:, 0] < 0.99)]  # not the table's front face at x = 1
    assert len(top) > 0.2 * width * height
    np.testing.assert_allclose(top[:, 2], 0.0, atol=0.0015)


def test_depth_noise_is_off_by_default_and_seeded(scene):
    # at the Kinect's depth pixel pitch, where DepthNoise's magnitudes are set
    with KinectCamera(scene.model, *FINE_RESOLUTION) as clean:
        z0 = clean.render_arrays(scene.data).depth_m
        z0_again = clean.render_arrays(scene.data).depth_m
    np.testing.assert_array_equal(z0, z0_again)
    noise = DepthNoise()
    frames = []
    for _ in range(2):
        with KinectCamera(scene.model, *FINE_RESOLUTION, depth_noise=noise,
                          seed=4) as noisy:
            frames.append(noisy.render_arrays(scene.data).depth_m)
    np.testing.assert_array_equal(frames[0], frames[1])
    z = frames[0]
    both = (z > 0) & (z0 > 0)
    assert not np.array_equal(z, z0)
    assert 0.001 < np.std(z[both] - z0[both]) < 0.01
    dropped = np.mean((z == 0) & (z0 > 0))
    assert noise.dropout_prob <= dropped < 0.05


#: Only the edge band: no range noise, no dropouts.
EDGES_ONLY = DepthNoise(sigma_base_m=0.0, sigma_per_m2=0.0, dropout_prob=0.0)


def test_depth_noise_edge_band_is_one_sensor_pixel_at_any_resolution():
    """Each side of a depth step: one sensor pixel is one pixel at 640 px wide, two at
    1280 and half of one (each adjacent pixel with probability 0.5) at 320."""
    for width, whole_columns, partial_columns in ((640, 1, 0), (1280, 2, 0), (320, 0, 1)):
        step = np.full((200, width), 1.0, dtype=np.float32)
        step[:, width // 2:] = 1.5
        invalid = EDGES_ONLY.apply(step, np.random.default_rng(0)) == 0.0
        half = width // 2
        near = np.r_[half - whole_columns - partial_columns:half + whole_columns
                     + partial_columns]
        assert not np.delete(invalid, near, axis=1).any()
        band = invalid[:, near]
        if partial_columns:
            assert 0.4 < band.mean() < 0.6
        else:
            assert band.all()


def test_depth_noise_takes_the_same_share_of_objects_at_any_resolution(scene):
    """The edge band follows the sensor, not the render: the objects lose about the same
    share of their pixels at 320x180, 640x360 and 1280x720."""
    scene.reset(seed=5)
    objects = {scene.model.geom(name).id for name in scene.object_names}
    shares = {}
    for resolution in (DEFAULT_RESOLUTION, FINE_RESOLUTION, HD_RESOLUTION):
        with KinectCamera(scene.model, *resolution) as cam:
            z = cam.render_arrays(scene.data).depth_m
            on_object = np.isin(cam.render_segmentation(scene.data), list(objects))
        invalid = EDGES_ONLY.apply(z, np.random.default_rng(0)) == 0.0
        shares[resolution] = invalid[on_object].mean()
    fine = shares[FINE_RESOLUTION]
    assert 0.05 < fine < 0.3
    for resolution in (DEFAULT_RESOLUTION, HD_RESOLUTION):
        assert 0.75 * fine < shares[resolution] < 1.25 * fine, shares


def test_depth_noise_does_not_lift_the_table_into_the_shipped_workspace(scene, camera):
    """The workspace floor must clear the time-of-flight noise on the table top: table
    points in the cloud outvote an object whose top face the gripper hides from the
    grounding's colour softmax (docs/explanation/rl.md, "Depth noise and the table")."""
    sync = RgbdSyncConfig()
    floor = sync.workspace()
    lowered = Workspace(floor.min_xyz - np.float32([0.0, 0.0, 0.007]), floor.max_xyz)
    table = scene.model.geom("table_top").id
    seg = camera.render_segmentation(scene.data).ravel()
    inside = inside_lowered = 0
    with KinectCamera(scene.model, depth_noise=DepthNoise(), seed=11) as noisy:
        for _ in range(10):
            _, depth = noisy.render(scene.data)
            z = decode_depth(depth, min_depth_m=sync.min_depth_m)
            points = sync.camera_to_base().apply(depth_to_points(z, noisy.camera_model))
            on_table = points[(seg == table) & np.isfinite(points[:, 2])]
            inside += int(floor.contains(on_table).sum())
            inside_lowered += int(lowered.contains(on_table).sum())
    assert inside == 0
    # a floor 7 mm lower lets the noisy table in (1000 points at 640x360)
    assert inside_lowered > 1000 * camera.width * camera.height / (640 * 360)


def test_set_camera_pose_moves_the_optical_frame(scene):
    pose = RigidTransform.from_xyz_quat_xyzw([1.0, 0.3, 0.9], [-0.6, -0.7, 0.3, 0.25])
    set_camera_pose(scene.model, pose)
    with KinectCamera(scene.model) as cam:
        np.testing.assert_allclose(cam.camera_to_base().translation, pose.translation)
        np.testing.assert_allclose(cam.camera_to_base().rotation, pose.rotation, atol=1e-9)
        mujoco.mj_forward(scene.model, scene.data)
        np.testing.assert_allclose(cam.camera_to_base(scene.data).rotation, pose.rotation,
                                   atol=1e-9)


def test_resolution_beyond_the_offscreen_buffer_is_rejected(scene):
    with pytest.raises(ValueError):
        KinectCamera(scene.model, 1920, 1080)
