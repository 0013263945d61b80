"""Referring expressions: what the words ask for, and the one object of a scene they mean."""

import pytest

from diffusion_policy_ros.instructions.referring import (
    AMBIGUOUS,
    NAMES_NOTHING,
    OK,
    UNCLEAR,
    Referent,
    ResolverConfig,
    Viewpoint,
    parse_reference,
    resolve,
)

# The simulated table as the person across it sees it (the default viewpoint, x = 1.25 m):
# +y is their right, larger x is nearer to them.
SCENE = [
    Referent("red_cube", "red", "cube", 0.045, (0.50, -0.20, 0.02)),
    Referent("green_cube", "green", "cube", 0.040, (0.62, 0.00, 0.02)),
    Referent("blue_cube", "blue", "cube", 0.050, (0.45, 0.20, 0.025)),
    Referent("yellow_cylinder", "yellow", "cylinder", 0.07, (0.65, 0.27, 0.035)),
    Referent("purple_cylinder", "purple", "cylinder", 0.07, (0.38, -0.10, 0.035)),
]


@pytest.mark.parametrize("text, target", [
    ("pick up the red cube", "red_cube"),
    ("could you grab the violet can?", "purple_cylinder"),
    ("can you pick up the cube, the red one", "red_cube"),
    ("pick up the scarlet brick", "red_cube"),            # held-out words
    ("hand me the azure block", "blue_cube"),
    ("grab the smallest cube", "green_cube"),
    ("lift the biggest block", "blue_cube"),
    ("the leftmost cube", "red_cube"),
    ("the cylinder on the right", "yellow_cylinder"),
    ("the cube nearest to you", "green_cube"),
    ("the cube in the middle", "green_cube"),
    ("the farthest object", "purple_cylinder"),
    ("the cube next to the yellow cylinder", "blue_cube"),
    ("the block beside the purple can", "red_cube"),
    ("not the red cube, the green one", "green_cube"),
    ("the cylinder that is not yellow", "purple_cylinder"),
])
def test_the_words_name_one_object(text, target):
    resolution = resolve(parse_reference(text), SCENE)
    assert (resolution.status, resolution.target) == (OK, target), resolution


@pytest.mark.parametrize("text, status, candidates", [
    ("pick up the cube", AMBIGUOUS, ("red_cube", "green_cube", "blue_cube")),
    ("the cylinder", AMBIGUOUS, ("yellow_cylinder", "purple_cylinder")),
    ("the ball", NAMES_NOTHING, ()),
    ("the red cylinder", NAMES_NOTHING, ()),
    ("hello there", UNCLEAR, ()),
    ("the red or the blue cube", UNCLEAR, ()),
    ("the cube next to the cube", AMBIGUOUS,   # next to which?
     ("red_cube", "green_cube", "blue_cube")),
])
def test_words_that_name_nothing_or_several_are_refused_with_why(text, status, candidates):
    resolution = resolve(parse_reference(text), SCENE)
    assert resolution.status == status and resolution.target is None, resolution
    assert resolution.candidates == candidates and resolution.reason


def test_relations_tie_below_what_a_person_sees():
    close = [Referent("red_cube", "red", "cube", 0.045, (0.5, -0.01, 0.02)),
             Referent("blue_cube", "blue", "cube", 0.047, (0.5, 0.01, 0.02))]
    for text in ("the left cube", "the smaller cube", "the cube nearest to you"):
        assert resolve(parse_reference(text), close).status == AMBIGUOUS, text
    loose = ResolverConfig(place_margin_m=0.01, size_margin=0.01)
    assert resolve(parse_reference("the left cube"), close, loose).target == "red_cube"
    assert resolve(parse_reference("the smaller cube"), close, loose).target == "red_cube"


def test_left_and_right_are_the_person_s():
    behind_the_robot = ResolverConfig(viewpoint=Viewpoint(position_m=(-0.5, 0.0, 1.0)))
    ref = parse_reference("the leftmost cube")
    assert resolve(ref, SCENE).target == "red_cube"
    assert resolve(ref, SCENE, behind_the_robot).target == "blue_cube"


def test_the_parse_keeps_what_was_said():
    ref = parse_reference("No, not the red one, the small blue cube on the left")
    assert ref.correction and not ref.other
    assert (ref.colour, ref.shape, ref.size, ref.place) == ("blue", "cube", "small", "left")
    assert [x.colour for x in ref.excluded] == ["red"]
    assert ref.phrase() == "the small blue cube on the left"
    assert parse_reference("the other one").other
    assert parse_reference("can you lift it").shape is None  # "can" the verb, not a noun
