"""Sentences that name one object of a layout: without its colour ("the smallest cube",
"the cylinder on the left", "the cube next to the yellow cylinder", "the object nearest
to you"), or with it where the colour alone does not ("the small red cube", "the red
cube on the left").

``describe_without_colour`` and ``describe_with_colour`` draw, in a seeded order,
description patterns for the target and keep the first that ``referring.resolve`` takes
to it alone in this layout, so every sentence they return is right by construction
(and None when the layout offers none: three cubes in a row make "the cube in the
middle", two touching ones nothing). ``held_out`` draws the verbs and words no training
sentence uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from diffusion_policy_ros.instructions.referring import (
    Referent,
    ResolverConfig,
    parse_reference,
    resolve,
)
from diffusion_policy_ros.instructions.vocabulary import COLOURS, SHAPES

#: Verbs around a description: (seen, held out).
VERBS = (("pick up {}", "grasp {}", "lift {}", "grab {}", "please pick up {}"),
         ("would you mind picking up {}", "hand me {}", "fetch {}"))
#: Description patterns; {shape} a noun of the target's shape, {landmark} another object.
PATTERNS = (
    ("the smallest {shape}", "the tiniest {shape}"),
    ("the biggest {shape}", "the largest {shape}"),
    ("the leftmost {shape}", "the {shape} on the left"),
    ("the rightmost {shape}", "the {shape} on the right"),
    ("the {shape} nearest to you", "the {shape} closest to you"),
    ("the {shape} farthest from you", "the {shape} furthest from you"),
    ("the {shape} in the middle", "the {shape} in the centre"),
    ("the {shape} next to {landmark}", "the {shape} beside {landmark}"),
    ("the leftmost object", "the object on the left"),
    ("the object nearest to you", "the object closest to you"),
)


#: Patterns that keep the colour, for objects whose colour and shape repeat.
COLOUR_PATTERNS = (
    ("the smallest {colour} {shape}", "the small {colour} {shape}"),
    ("the biggest {colour} {shape}", "the big {colour} {shape}"),
    ("the {colour} {shape} on the left", "the leftmost {colour} {shape}"),
    ("the {colour} {shape} on the right", "the rightmost {colour} {shape}"),
    ("the {colour} {shape} nearest to you", "the {colour} {shape} closest to you"),
    ("the {colour} {shape} farthest from you", "the {colour} {shape} furthest from you"),
    ("the {colour} {shape} next to {landmark}", "the {colour} {shape} beside {landmark}"),
)


def _landmark(target: Referent, objects: Sequence[Referent], held_out: bool) -> str:
    """The object nearest to the target, by colour and shape (its own words)."""
    others = [o for o in objects if o.name != target.name]
    if not others:
        return ""
    near = min(others, key=lambda o: np.linalg.norm(np.subtract(o.position_m,
                                                                target.position_m)[:2]))
    colours = COLOURS[near.colour].held_out if held_out and COLOURS[near.colour].held_out \
        else COLOURS[near.colour].seen
    return f"the {colours[0]} {SHAPES[near.shape].seen[0]}"


def describe_without_colour(target: str, objects: Sequence[Referent],
                            rng: np.random.Generator, held_out: bool = False,
                            config: ResolverConfig | None = None) -> str | None:
    """A sentence asking for ``target`` by shape, size and place (not its colour) that
    names it alone in ``objects``, or None."""
    return _describe(PATTERNS, target, objects, rng, held_out, config)


def describe_with_colour(target: str, objects: Sequence[Referent], rng: np.random.Generator,
                         held_out: bool = False,
                         config: ResolverConfig | None = None) -> str | None:
    """A sentence asking for ``target`` by colour and shape plus a size, a place or a
    neighbour, that names it alone in ``objects``, or None."""
    return _describe(COLOUR_PATTERNS, target, objects, rng, held_out, config)


def _describe(patterns, target: str, objects: Sequence[Referent], rng: np.random.Generator,
              held_out: bool, config: ResolverConfig | None) -> str | None:
    chosen = next(o for o in objects if o.name == target)
    shapes, colours = SHAPES[chosen.shape], COLOURS[chosen.colour]
    nouns = shapes.held_out if held_out and shapes.held_out else shapes.seen
    adjectives = colours.held_out if held_out and colours.held_out else colours.seen
    verbs = VERBS[1] if held_out else VERBS[0]
    landmark = _landmark(chosen, objects, held_out)
    for i in rng.permutation(len(patterns)):
        pattern = patterns[i][int(rng.integers(2))]
        phrase = pattern.format(shape=nouns[int(rng.integers(len(nouns)))], landmark=landmark,
                                colour=adjectives[int(rng.integers(len(adjectives)))])
        if resolve(parse_reference(phrase), objects, config).target == target:
            return verbs[int(rng.integers(len(verbs)))].format(phrase)
    return None
