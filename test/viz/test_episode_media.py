"""Episode pictures: path projection through the camera model, GIF and plot files."""

import numpy as np
import pytest
from PIL import Image

from diffusion_policy_ros.perception.geometry import CameraModel, RigidTransform
from diffusion_policy_ros.viz.episode_media import (
    EpisodeRecording,
    MediaFrame,
    PathProjector,
    draw_frame,
    write_gif,
)

CAMERA = CameraModel(640, 360, (500.0, 0.0, 320.0, 0.0, 500.0, 180.0, 0.0, 0.0, 1.0),
                     "plumb_bob", (0.0,) * 5)
# The rig of config/rgbd_sync.yaml: 1.25 m in front of the arm, 0.8 m up, looking down at it.
CAMERA_TO_BASE = RigidTransform.from_xyz_quat_xyzw(
    [1.25, 0.0, 0.80], [-0.653281, -0.653281, 0.270598, 0.270598])


def test_points_on_the_optical_axis_land_on_the_principal_point():
    projector = PathProjector(CAMERA, CAMERA_TO_BASE)
    on_axis = CAMERA_TO_BASE.apply(np.array([[0.0, 0.0, 0.5], [0.0, 0.0, 2.0],
                                             [0.1, -0.05, 1.0], [0.0, 0.0, -1.0]]))
    pixels, ok = projector.project(on_axis)
    assert pixels[:2] == pytest.approx(np.array([[320.0, 180.0]] * 2), abs=1e-6)
    assert pixels[2] == pytest.approx([320.0 + 50.0, 180.0 - 25.0], abs=1e-6)
    assert ok.tolist() == [True, True, True, False]  # the last one is behind the camera


def test_gif_has_one_picture_per_frame_with_the_path_drawn(tmp_path):
    projector = PathProjector(CAMERA, CAMERA_TO_BASE)
    rec = EpisodeRecording(["j1", "j2"], start_s=10.0, title="t")
    path = CAMERA_TO_BASE.apply(np.array([[x, 0.0, 1.0] for x in np.linspace(-0.2, 0.2, 16)]))
    black = np.zeros((360, 640, 3), np.uint8)
    rec.add_frame(10.0, black)  # before the first chunk: no path
    rec.set_path(path, closing=True)
    for t in (10.05, 10.1, 10.2):  # 10.05 is thinned away (10 frames/s)
        rec.add_frame(t, black)
    for t in np.arange(10.0, 11.0, 0.01):
        rec.add_measured(t, [t, 0.02])
        rec.add_reference(t, [t + 0.01, 0.02])
    rec.add_chunk(10.1, 40.0)
    written = rec.write(tmp_path, "episode", projector)
    with Image.open(written["gif"]) as gif:
        assert gif.n_frames == 3 and gif.size == (480, 270)
    assert len(rec.trace.t_measured_s) == 50  # thinned to 50 Hz
    picture = np.asarray(draw_frame(rec.frames[-1], projector, width=640).convert("RGB"))
    assert (picture[180, 222:410] == (40, 220, 60)).all(axis=-1).all()  # the path line
    assert picture[180, 420].tolist() == [230, 30, 30]  # closing: red end
    assert np.asarray(draw_frame(rec.frames[0], projector, 640))[100:].max() == 0  # no path
    assert Image.open(written["plot"]).size[0] > 500


def test_no_frames_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no frames"):
        write_gif([], tmp_path / "x.gif", None)


def test_gif_keeps_the_colour_of_a_small_object_on_a_large_shaded_table(tmp_path):
    """A palette spent on the table's shades alone would turn the small objects, whose
    colours the instructions name, into table colours."""

    rows, cols = np.mgrid[0:360, 0:640]
    frame = np.stack([150 + cols * 60 // 640, 110 + rows * 60 // 360,
                      70 + (rows + cols) * 40 // 1000], axis=-1).astype(np.uint8)
    purple = np.array([150, 40, 170], np.uint8)
    frame[200:210, 300:308] = purple  # about a can's top at the camera's distance
    path = write_gif([MediaFrame(0.0, frame)], tmp_path / "one.gif", None)
    with Image.open(path) as gif:
        back = np.asarray(gif.convert("RGB")).astype(int)
    # 640 -> 480 wide: the patch is at (150:157, 225:231) in the GIF; its centre pixel
    centre = back[153, 228]
    assert np.abs(centre - purple.astype(int)).max() <= 24, centre.tolist()


def test_a_small_camera_image_is_scaled_up_to_the_gif_width():
    frame = MediaFrame(t_s=0.0, image_rgb=np.zeros((180, 320, 3), np.uint8))
    assert draw_frame(frame, None).size == (480, 270)
