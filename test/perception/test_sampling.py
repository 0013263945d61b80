import numpy as np
import pytest

from diffusion_policy_ros.perception.sampling import (
    VoxelGrid,
    fixed_count_indices,
    pack_rgb_float,
    unpack_rgb_float,
)


def test_voxel_grid_keeps_one_point_per_occupied_voxel():
    rng = np.random.default_rng(0)
    pts = rng.uniform([0, 0, 0], [0.5, 0.4, 0.3], size=(20000, 3)).astype(np.float32)
    grid = VoxelGrid([0, 0, 0], [0.5, 0.4, 0.3], 0.02)
    kept = grid.downsample(pts)
    cells = np.floor(pts / 0.02).astype(int)
    assert kept.size == len({tuple(c) for c in cells})
    assert len({tuple(c) for c in cells[kept]}) == kept.size
    again = grid.downsample(pts)
    np.testing.assert_array_equal(kept, again)


def test_voxel_grid_refuses_huge_grids():
    with pytest.raises(ValueError, match="voxel"):
        VoxelGrid([0, 0, 0], [100, 100, 100], 0.001)


@pytest.mark.parametrize("sampler", ["fps", "uniform"])
def test_exactly_count_points_when_more_are_available(sampler):
    pts = np.random.default_rng(1).normal(size=(3000, 3))
    idx, padded = fixed_count_indices(pts, 1024, sampler)
    assert idx.shape == (1024,) and padded == 0
    assert len(set(idx.tolist())) == 1024


def test_padding_is_deterministic_and_reported():
    pts = np.arange(30, dtype=float).reshape(10, 3)
    idx, padded = fixed_count_indices(pts, 25)
    assert padded == 15
    np.testing.assert_array_equal(idx[:10], np.arange(10))
    np.testing.assert_array_equal(idx[10:20], np.arange(10))
    np.testing.assert_array_equal(idx, fixed_count_indices(pts, 25)[0])


def test_fps_covers_space_better_than_uniform():
    rng = np.random.default_rng(2)
    pts = np.concatenate([rng.normal(0, 0.01, (4000, 3)), rng.uniform(-1, 1, (1000, 3))])

    def coverage(idx):
        chosen = pts[idx]
        d = np.linalg.norm(pts[:, None, :] - chosen[None, :, :], axis=2).min(axis=1)
        return d.max()

    assert coverage(fixed_count_indices(pts, 256, "fps")[0]) < \
        0.5 * coverage(fixed_count_indices(pts, 256, "uniform")[0])


def test_unknown_sampler_and_empty_input():
    with pytest.raises(ValueError):
        fixed_count_indices(np.zeros((5, 3)), 2, "magic")
    with pytest.raises(ValueError):
        fixed_count_indices(np.zeros((0, 3)), 2)


def test_rgb_packing_round_trip():
    rgb = np.random.default_rng(3).integers(0, 256, size=(100, 3)).astype(np.uint8)
    packed = pack_rgb_float(rgb)
    assert packed.dtype == np.float32
    r, g, b = (int(c) for c in rgb[0])
    assert packed.view(np.uint32)[0] == (r << 16) | (g << 8) | b
    np.testing.assert_array_equal(unpack_rgb_float(packed), rgb)
