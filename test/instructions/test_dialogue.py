"""Corrections resolve against the dialogue so far."""

from diffusion_policy_ros.instructions.dialogue import Dialogue
from diffusion_policy_ros.instructions.referring import AMBIGUOUS, NOTHING_TO_CORRECT, OK

from .test_referring import SCENE


def _said(dialogue, *texts):
    return [dialogue.hear(text, SCENE) for text in texts]


def test_no_the_blue_one_keeps_the_kind_of_object():
    d = Dialogue()
    first, second = _said(d, "pick up the red cube", "no, the blue one")
    assert (first.target, second.target) == ("red_cube", "blue_cube")
    assert d.instruction() == "pick up the blue cube"


def test_the_other_one_is_the_other_of_its_kind_or_ambiguous():
    d = Dialogue()
    *_, other = _said(d, "grab the yellow cylinder", "the other one")
    assert other.target == "purple_cylinder" and d.instruction() == "pick up the purple cylinder"
    d = Dialogue()
    *_, other = _said(d, "grab the red cube", "the other one")
    assert other.status == AMBIGUOUS and set(other.candidates) == {"green_cube", "blue_cube"}
    assert d.target == "red_cube"  # a refused correction leaves the task as it was


def test_the_one_on_the_left_is_among_the_kind_asked_for():
    d = Dialogue()
    *_, left = _said(d, "pick up the yellow cylinder", "the one on the left")
    assert left.target == "purple_cylinder"
    # Of a kind the scene has no such object of: any object that fits.
    *_, red = _said(d, "no, the red one")
    assert (red.status, red.target) == (OK, "red_cube")


def test_a_correction_with_nothing_to_correct_is_refused():
    d = Dialogue()
    for text in ("no, the blue one", "the other one"):
        resolution = d.hear(text, SCENE)
        assert resolution.status == NOTHING_TO_CORRECT and resolution.target is None
    assert d.instruction() == ""
    # A bare "the one on the left" stands on its own: the leftmost object.
    assert d.hear("the one on the left", SCENE).target == "red_cube"
