"""The table top's height and depth noise, and the workspace floor they ask for."""

import dataclasses
import json

import numpy as np
import pytest

from diffusion_policy_ros.cli import main
from diffusion_policy_ros.learning.episode_bag import EpisodeBagWriter
from diffusion_policy_ros.perception.geometry import PixelRays, Workspace
from diffusion_policy_ros.perception.image_decoding import decode_depth
from diffusion_policy_ros.perception.pipeline import RgbdSyncConfig
from diffusion_policy_ros.perception.synthetic_scene import (
    KINECT_NFOV,
    SyntheticKinect,
    TableBoxScene,
)
from diffusion_policy_ros.perception.table_floor import (
    estimate_table_floor,
    table_heights_m,
    table_pixels_above,
)

CONFIG = RgbdSyncConfig()
RAYS = PixelRays.build(KINECT_NFOV, CONFIG.camera_to_base(), stride=1)
TABLE_Z_M = 0.0


def _noisy_frames(n: int, sigma_m: float, seed: int = 0) -> tuple[SyntheticKinect, list]:
    """``n`` noisy depth images of the table and a box (noise along the depth, mm steps)."""
    kinect = SyntheticKinect(KINECT_NFOV, CONFIG.camera_to_base(),
                             TableBoxScene(table_z_m=TABLE_Z_M))
    clean, rng, frames = kinect.depth_m.copy(), np.random.default_rng(seed), []
    for _ in range(n):
        kinect.depth_m = np.where(clean > 0, clean + rng.normal(0.0, sigma_m, clean.shape), 0.0)
        frames.append(kinect.depth_image())
    kinect.depth_m = clean
    return kinect, frames


def _heights(frames) -> np.ndarray:
    return np.stack([table_heights_m(decode_depth(f), RAYS, CONFIG.workspace()) for f in frames])


def test_pixels_outside_the_workspace_or_without_a_return_have_no_height():
    kinect, _ = _noisy_frames(1, 0.0)
    depth = kinect.depth_m.copy()
    depth[:10] = np.nan
    depth[10:20] = 0.0
    heights = table_heights_m(depth, RAYS, CONFIG.workspace())
    rows = heights.reshape(depth.shape)
    assert np.all(np.isnan(rows[:20]))
    finite = heights[np.isfinite(heights)]
    assert finite.size > 50_000
    on_table = np.abs(finite - TABLE_Z_M) < 1e-3  # exact geometry, mm depth steps
    assert on_table.mean() > 0.9  # the rest is the box


def test_table_height_and_noise_match_the_known_table_pixels():
    kinect, frames = _noisy_frames(8, 0.003)
    heights = _heights(frames)
    table = estimate_table_floor(heights)
    # Ground truth: the pixels the synthetic camera coloured as the table.
    is_table = np.all(kinect.rgb.reshape(-1, 3) == kinect.scene.table_rgb, axis=1)
    truth = heights[:, is_table]
    truth = truth[np.isfinite(truth)]
    assert table.table_z_m == pytest.approx(TABLE_Z_M, abs=5e-4)
    assert table.noise_sigma_m == pytest.approx(float(np.std(truth)), rel=0.1)
    clean = table_heights_m(kinect.depth_m, RAYS, CONFIG.workspace())
    assert np.sum(clean > 0.1) > 1000  # the box's top is in view, and it is not the table
    assert np.nanmax(clean[table.pixel_index]) < 0.004  # (NaN: at the x-y edge, clean)
    # The recommendation clears every table pixel seen; a floor inside the noise does not.
    assert table.recommended_floor_z_m >= table.table_z_m + table.above_table_m["max"]
    assert table_pixels_above(heights, table, table.recommended_floor_z_m) <= 1.0
    assert table_pixels_above(heights, table, TABLE_Z_M + 0.005) > 1000


def test_something_passing_over_the_table_is_not_its_noise():
    _, frames = _noisy_frames(8, 0.002)
    heights = _heights(frames)
    quiet = estimate_table_floor(heights)
    occluded = heights.copy()
    occluded[:3, quiet.pixel_index[::4]] = TABLE_Z_M + 0.3  # the arm over a quarter of it
    busy = estimate_table_floor(occluded)
    assert busy.noise_sigma_m == pytest.approx(quiet.noise_sigma_m, rel=0.05)
    assert busy.above_table_m["max"] < 0.05
    assert table_pixels_above(occluded, busy, TABLE_Z_M + 0.1) == 0.0


def test_a_camera_without_noise_still_gets_a_floor_above_the_table():
    _, frames = _noisy_frames(2, 0.0)
    table = estimate_table_floor(_heights(frames))
    assert table.noise_sigma_m < 5e-4  # the millimetre depth steps only
    assert table.recommended_floor_z_m > table.table_z_m
    assert table.table_pixels > 50_000


def test_no_pixel_inside_the_workspace_is_a_clear_error():
    _, frames = _noisy_frames(1, 0.0)
    far = Workspace(np.float32([5.0, 5.0, 0.0]), np.float32([6.0, 6.0, 1.0]))
    heights = table_heights_m(decode_depth(frames[0]), RAYS, far)
    with pytest.raises(ValueError, match="workspace"):
        estimate_table_floor(heights[None])


def _blank_color():
    kinect = SyntheticKinect(KINECT_NFOV, CONFIG.camera_to_base())
    return kinect.color_image()


def test_dpr_table_floor_reads_a_bag_and_reports_the_floor(tmp_path, capsys):
    _, frames = _noisy_frames(6, 0.0015, seed=3)
    bag = tmp_path / "table"
    with EpisodeBagWriter(bag, raw_camera=True) as writer:
        for i, depth in enumerate(frames):
            writer.raw_camera_frame(i * 33_333_333, _blank_color(), depth, KINECT_NFOV)
    report = tmp_path / "floor.json"
    assert main(["table-floor", "--bag", str(bag), "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "recommended: workspace_min z >=" in out
    figures = json.loads(report.read_text())
    assert figures["frames"] == 6
    assert figures["table_z_m"] == pytest.approx(TABLE_Z_M, abs=5e-4)
    assert figures["configured_floor_z_m"] == pytest.approx(CONFIG.workspace_min[2])
    assert figures["table_pixels_above_floor_per_frame"] == 0.0
    assert TABLE_Z_M < figures["recommended_floor_z_m"] < CONFIG.workspace_min[2]


def test_dpr_table_floor_without_depth_frames_is_one_line_and_exit_2(tmp_path, capsys):
    bag = tmp_path / "no_camera"
    with EpisodeBagWriter(bag) as writer:
        writer.instruction(0, "pick up the red cube")
    assert main(["table-floor", "--bag", str(bag)]) == 2
    assert "no camera/depth_to_rgb/image_raw frame" in capsys.readouterr().err


def test_dpr_table_floor_with_a_corrupt_depth_frame_is_one_line_and_exit_2(tmp_path, capsys):
    _, frames = _noisy_frames(1, 0.0)
    bad = dataclasses.replace(frames[0], data=frames[0].data[:100])  # truncated payload
    bag = tmp_path / "corrupt"
    with EpisodeBagWriter(bag, raw_camera=True) as writer:
        writer.raw_camera_frame(0, _blank_color(), bad, KINECT_NFOV)
    assert main(["table-floor", "--bag", str(bag)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpr table-floor:") and len(err.strip().splitlines()) == 1
