"""Colour swap: scene colours and the instruction's colour word move together."""

import numpy as np
import pytest

from diffusion_policy_ros.learning.augmentation import SCENE_OBJECT_RGB, ColourSwap
from diffusion_policy_ros.sim.task import parse_instruction

BASE = {"red": (0.85, 0.1, 0.1), "green": (0.1, 0.7, 0.15), "blue": (0.1, 0.25, 0.9),
        "yellow": (0.95, 0.85, 0.1), "purple": (0.6, 0.2, 0.75)}
GROUPS = [["red", "green", "blue"], ["yellow", "purple"]]
OBJECTS = ["red_cube", "green_cube", "blue_cube", "yellow_cylinder", "purple_cylinder"]


def _shade(colour, k):
    return np.rint(np.array(BASE[colour]) * 255 * k).astype(np.uint8)


def test_classes_follow_the_hue_not_the_shading_and_grey_stays_out():
    swap = ColourSwap(BASE, GROUPS)
    pixels = np.stack([_shade("red", 0.5), _shade("red", 1.0), _shade("blue", 0.6),
                       _shade("purple", 0.8), np.array([90, 90, 95], np.uint8),
                       np.array([160, 128, 92], np.uint8)])  # the table's brown
    assert swap.classify(pixels).tolist() == [0, 0, 2, 4, -1, -1]


def test_recolouring_keeps_shading_and_leaves_the_rest():
    swap = ColourSwap(BASE, GROUPS)
    mapping = {"red": "blue", "blue": "red", "green": "green", "yellow": "purple",
               "purple": "yellow"}
    image = np.stack([_shade("red", 0.5), _shade("red", 1.0), np.array([60, 60, 62], np.uint8)])
    out = swap.recolour(image, mapping)
    assert swap.classify(out[:2]).tolist() == [2, 2]  # now blue
    assert out[0].sum() < out[1].sum()  # the darker red became the darker blue
    assert out[2].tolist() == [60, 60, 62]


@pytest.mark.parametrize("seed", range(5))
def test_the_instruction_names_the_same_physical_object_after_the_swap(seed):
    swap = ColourSwap(BASE, GROUPS)
    mapping = swap.sample(np.random.default_rng(seed))
    assert sorted(mapping.values()) == sorted(BASE)
    assert all(mapping[c] in g for g in GROUPS for c in g)  # never across shapes
    for target in OBJECTS:
        colour, shape = target.split("_")
        text = f"grab the {shape} that is {'violet' if colour == 'purple' else colour}"
        new = swap.instruction(text, mapping)
        assert parse_instruction(new, OBJECTS) == f"{mapping[colour]}_{shape}"
        assert new in swap.instruction_variants(text)


def test_the_shipped_object_colours_are_the_simulated_scene_s():
    """Training reads no MuJoCo model: its copy of the object colours must match the MJCF
    the demonstrations were rendered from, to the float32 that ColourSwap keeps."""
    from diffusion_policy_ros.sim.scene import find_objects, load_model

    model = load_model()
    simulated = {obj.name: model.geom_rgba[obj.geom_id][:3] for obj in find_objects(model)}
    assert list(SCENE_OBJECT_RGB) == list(simulated)
    swap = ColourSwap.from_objects()
    for name, rgb in simulated.items():
        np.testing.assert_array_equal(swap.base[swap.colours.index(name.split("_")[0])], rgb)
    assert sorted(swap.colours) == sorted(BASE)
    assert sorted(map(sorted, swap.groups)) == sorted(map(sorted, GROUPS))
