import dataclasses

import numpy as np
import pytest

from diffusion_policy_ros.config import CONFIG_DIR, ConfigError, config_from_params, load_config
from diffusion_policy_ros.perception.geometry import CameraModel
from diffusion_policy_ros.perception.image_decoding import FrameRejected, RawImage
from diffusion_policy_ros.perception.pipeline import RgbdObservationPipeline, RgbdSyncConfig
from diffusion_policy_ros.perception.synthetic_scene import (
    KINECT_720P,
    KINECT_NFOV,
    SyntheticKinect,
)

TABLE_INCLUDED = dict(workspace_min=[0.15, -0.45, -0.02])


def make(camera=KINECT_NFOV, **overrides):
    cfg = dataclasses.replace(RgbdSyncConfig(), **overrides)
    pipe = RgbdObservationPipeline(cfg)
    pipe.set_camera(camera)
    return pipe, SyntheticKinect(camera, cfg.camera_to_base())


@pytest.mark.parametrize("camera", [KINECT_NFOV, KINECT_720P], ids=["640x576", "1280x720"])
def test_points_lie_on_the_known_surfaces_in_base_link(camera):
    pipe, kinect = make(camera, **TABLE_INCLUDED)
    obs = pipe.process(kinect.color_image(), kinect.depth_image())
    assert obs.points.shape == (1024, 3) and obs.points.dtype == np.float32
    assert obs.num_padded == 0 and obs.num_valid > 1024
    dist = kinect.scene.distance_to_surfaces(obs.points)
    assert dist.max() < 0.003
    ws = pipe.workspace
    assert np.all(obs.points >= ws.min_xyz) and np.all(obs.points <= ws.max_xyz)
    on_box = obs.points[:, 2] > 0.005
    assert on_box.any()
    np.testing.assert_array_equal(np.unique(obs.colors[on_box], axis=0), [kinect.scene.box_rgb])
    lo, hi = np.asarray(kinect.scene.box_min), np.asarray(kinect.scene.box_max)
    off_box = np.any((obs.points[:, :2] < lo[:2] - 0.01) | (obs.points[:, :2] > hi[:2] + 0.01), 1)
    np.testing.assert_array_equal(np.unique(obs.colors[off_box], axis=0), [kinect.scene.table_rgb])
    assert obs.image_rgb.shape == (128, 128, 3) and obs.image_rgb.dtype == np.uint8


def test_default_workspace_leaves_out_the_table_and_pads_deterministically():
    pipe, kinect = make()
    first = pipe.process(kinect.color_image(), kinect.depth_image())
    second = pipe.process(kinect.color_image(), kinect.depth_image())
    assert first.points.shape == (1024, 3)
    assert 0 < first.num_valid < 1024 and first.num_padded == 1024 - first.num_valid
    assert np.all(first.points[:, 2] > 0.005)
    np.testing.assert_array_equal(first.points, second.points)


def test_new_intrinsics_of_the_same_size_are_used_from_the_next_frame():
    """A camera_info that changes K (recalibration, another colour mode scaled to the same
    size) must re-derive the pixel rays; stale rays would misplace every point."""
    pipe, kinect = make(KINECT_NFOV, **TABLE_INCLUDED)
    k = list(KINECT_NFOV.k)
    k[0], k[4], k[2] = 1.15 * k[0], 1.15 * k[4], k[2] + 12.0
    recalibrated = dataclasses.replace(KINECT_NFOV, k=tuple(k))
    new_kinect = SyntheticKinect(recalibrated, pipe.config.camera_to_base())
    stale = pipe.process(new_kinect.color_image(), new_kinect.depth_image())
    assert new_kinect.scene.distance_to_surfaces(stale.points).max() > 0.01
    assert pipe.set_camera(recalibrated) == []
    fresh = pipe.process(new_kinect.color_image(), new_kinect.depth_image())
    assert new_kinect.scene.distance_to_surfaces(fresh.points).max() < 0.003
    assert pipe.set_camera(KINECT_NFOV) == []  # and back
    back = pipe.process(kinect.color_image(), kinect.depth_image())
    assert kinect.scene.distance_to_surfaces(back.points).max() < 0.003


def test_full_cloud_covers_the_whole_image_in_base_frame():
    pipe, kinect = make()
    points, colors = pipe.full_cloud(kinect.color_image(), kinect.depth_image())
    assert points.shape[0] == colors.shape[0] > 10000
    assert kinect.scene.distance_to_surfaces(points).max() < 0.004


def test_policy_image_is_centre_crop_resize_in_rgb():
    pipe, _ = make(image_size=[64, 96])
    rgb = np.zeros((576, 640, 3), np.uint8)
    rgb[:, :, 0] = 255
    bgra = np.dstack([rgb[..., 2], rgb[..., 1], rgb[..., 0], np.full((576, 640), 255, np.uint8)])
    img = RawImage(576, 640, "bgra8", 640 * 4, bgra.tobytes())
    depth = RawImage(576, 640, "16UC1", 1280, np.full((576, 640), 900, "<u2").tobytes())
    out = pipe.process(img, depth).image_rgb
    assert out.shape == (64, 96, 3)
    assert (out[..., 0] == 255).all() and (out[..., 1:] == 0).all()
    # The colour frame alone gives the same image (rgbd_sync_node publishes it before the
    # depth arrives); the points then come without it.
    assert np.array_equal(pipe.image_of(img), out)
    points_only = pipe.process(img, depth, with_image=False)
    assert points_only.image_rgb is None and points_only.points.shape == (1024, 3)
    with pytest.raises(FrameRejected, match="camera_info 640x576"):
        pipe.image_of(RawImage(288, 320, "bgra8", 320 * 4, bytes(288 * 320 * 4)))
    with pytest.raises(FrameRejected, match="no camera_info"):
        RgbdObservationPipeline(pipe.config).image_of(img)


def _depth32(values: np.ndarray) -> RawImage:
    h, w = values.shape
    return RawImage(h, w, "32FC1", w * 4, values.astype("<f4").tobytes())


def test_nan_and_inf_depth_pixels_are_invalid_not_fatal():
    pipe, kinect = make(**TABLE_INCLUDED)
    depth = kinect.depth_m.astype(np.float32).copy()
    depth[::3, ::5] = np.nan
    depth[1::3, 1::5] = np.inf
    obs = pipe.process(kinect.color_image(), _depth32(depth))
    assert obs.invalid_depth_fraction > 0.1
    assert kinect.scene.distance_to_surfaces(obs.points).max() < 0.003


@pytest.mark.parametrize("case,reason", [
    ("no_camera_info", "no_camera_info"),
    ("size_mismatch", "size_mismatch"),
    ("camera_info_size", "camera_info_size_mismatch"),
    ("unknown_encoding", "unknown_encoding"),
    ("data_length", "bad_data_length"),
    ("all_nan_depth", "empty_workspace"),
    ("empty_workspace", "empty_workspace"),
])
def test_bad_frames_are_rejected_and_the_next_good_frame_works(case, reason):
    pipe, kinect = make()
    color, depth = kinect.color_image(), kinect.depth_image()
    if case == "no_camera_info":
        pipe = RgbdObservationPipeline(pipe.config)
    elif case == "size_mismatch":
        depth = RawImage(10, 10, "16UC1", 20, bytes(200))
    elif case == "camera_info_size":
        pipe.set_camera(dataclasses.replace(KINECT_720P))
    elif case == "unknown_encoding":
        color = dataclasses.replace(color, encoding="yuv422")
    elif case == "data_length":
        color = dataclasses.replace(color, data=color.data[:-1])
    elif case == "all_nan_depth":
        depth = _depth32(np.full(kinect.depth_m.shape, np.nan))
    elif case == "empty_workspace":
        depth = _depth32(np.full(kinect.depth_m.shape, 2.9))
    with pytest.raises(FrameRejected) as err:
        pipe.process(color, depth)
    assert err.value.reason == reason
    pipe.set_camera(KINECT_NFOV)
    good = pipe.process(kinect.color_image(), kinect.depth_image())
    assert good.points.shape == (1024, 3)


def test_zero_k_is_rejected_and_unsupported_distortion_warns():
    pipe, _ = make()
    with pytest.raises(FrameRejected, match="not calibrated"):
        pipe.set_camera(CameraModel(640, 576, (0.0,) * 9))
    assert pipe.camera == KINECT_NFOV
    fisheye = CameraModel(640, 576, KINECT_NFOV.k, "equidistant", (0.1, 0.01, 0.0, 0.0))
    assert "not supported" in pipe.set_camera(fisheye)[0]
    assert pipe.set_camera(fisheye) == []


def test_shipped_yaml_matches_config_defaults():
    cfg = load_config(RgbdSyncConfig, CONFIG_DIR / "rgbd_sync.yaml", "rgbd_sync_node")
    assert cfg == RgbdSyncConfig()


@pytest.mark.parametrize("params,match", [
    ({"max_skew_s": 0.5}, "above its maximum"),
    ({"num_points": 0}, "below its minimum"),
    ({"sampler": "magic"}, "one of"),
    ({"workspace_min": [0.0, 0.0]}, "3 elements"),
    ({"workspace_min": [1.0, 0.0, 0.0], "workspace_max": [0.5, 1.0, 1.0]}, "workspace_min"),
    ({"camera_to_base.rotation_xyzw": [0.0, 0.0, 0.0, 0.0]}, "quaternion"),
    ({"min_depth_m": 2.0, "max_depth_m": 1.0}, "min_depth_m"),
    ({"max_skw_s": 0.01}, "unknown parameter"),
    ({"max_skew_s": "fast"}, "number"),
])
def test_bad_config_is_rejected_with_a_clear_message(params, match):
    with pytest.raises(ConfigError, match=match):
        config_from_params(RgbdSyncConfig, params)
