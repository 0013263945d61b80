"""Descriptions without colour name their object alone, in any layout."""

import numpy as np

from diffusion_policy_ros.instructions.descriptions import describe_without_colour
from diffusion_policy_ros.instructions.referring import Referent, parse_reference, resolve
from diffusion_policy_ros.instructions.vocabulary import COLOURS

from .test_referring import SCENE


def _layout(rng) -> list[Referent]:
    xy = rng.uniform((0.35, -0.3), (0.7, 0.3), (len(SCENE), 2))
    return [Referent(o.name, o.colour, o.shape, o.size_m, (x, y, o.position_m[2]))
            for o, (x, y) in zip(SCENE, xy, strict=True)]


def test_every_description_names_its_target_alone_and_not_by_colour():
    described = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        objects = _layout(rng)
        for held_out in (False, True):
            for target in objects:
                sentence = describe_without_colour(target.name, objects, rng, held_out)
                if sentence is None:
                    continue
                described += 1
                assert resolve(parse_reference(sentence), objects).target == target.name
                assert not set(sentence.split()) & set(COLOURS[target.colour].all), sentence
    assert described > 0.8 * 200 * 2 * len(SCENE)


def test_held_out_descriptions_use_held_out_verbs_and_nouns():
    rng = np.random.default_rng(0)
    sentence = describe_without_colour("purple_cylinder", SCENE, rng, held_out=True)
    assert sentence is not None and "tube" in sentence
    assert sentence.startswith(("would you mind", "hand me", "fetch"))
