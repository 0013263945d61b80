"""Language tasks: instructions parse back to their target; success, wrong object, time limit."""

import itertools

import numpy as np
import pytest

from diffusion_policy_ros.sim.task import (
    COLOUR_WORDS,
    SHAPE_WORDS,
    TEMPLATES,
    GraspTask,
    TaskConfig,
    TaskEvaluator,
    describe,
    instruction_for,
    parse_instruction,
    sample_task,
)

OBJECTS = ("red_cube", "green_cube", "blue_cube", "yellow_cylinder", "purple_cylinder")
REST_M = np.array([0.0225, 0.02, 0.025, 0.035, 0.035])


def test_every_template_and_synonym_parses_back_to_its_object():
    for name, template in itertools.product(OBJECTS, TEMPLATES):
        colour, shape = describe(name)
        for colour_word, shape_word in itertools.product(COLOUR_WORDS[colour], SHAPE_WORDS[shape]):
            text = template.format(colour=colour_word, shape=shape_word)
            assert parse_instruction(text, OBJECTS) == name, text


def test_sampled_instructions_vary_and_name_their_target():
    rng = np.random.default_rng(0)
    tasks = [sample_task(OBJECTS, rng) for _ in range(600)]
    assert {t.target for t in tasks} == set(OBJECTS)
    assert len({t.instruction for t in tasks}) > 100
    verbs = {t.instruction.split()[0] for t in tasks}
    assert {"pick", "grasp", "lift", "grab", "take"} <= verbs
    for t in tasks:
        assert parse_instruction(t.instruction, OBJECTS) == t.target
    again = np.random.default_rng(0)
    assert [sample_task(OBJECTS, again) for _ in range(600)] == tasks


@pytest.mark.parametrize("text, expected", [
    ("Pick up the RED block!", "red_cube"),
    ("can you pick up the yellow can", "yellow_cylinder"),
    ("can you grab the green box", "green_cube"),
    ("the violet one, please", "purple_cylinder"),
    ("pick up the red cylinder", None),      # no such object
    ("grab the red cube and the blue cube", None),  # two colours
    ("lift the orange cube", None),          # unknown colour
    ("pick up the cube", None),              # no colour: three cubes fit
    ("lift the blue cube can", None),        # two shapes
    ("pick it up", None),
])
def test_parser_on_free_text(text, expected):
    assert parse_instruction(text, OBJECTS) == expected


def test_object_names_must_be_colour_and_shape():
    assert describe("purple_cylinder") == ("purple", "cylinder")
    for bad in ("cube", "pink_cube", "red_pyramid"):
        with pytest.raises(ValueError):
            describe(bad)
    with pytest.raises(ValueError):
        instruction_for("table", np.random.default_rng(0))


def _run(heights_fn, target="blue_cube", config=None, dt=0.002, until=25.0):
    """Feed ``heights_fn(t) -> (5,)`` every ``dt`` until done; returns the final state."""
    ev = TaskEvaluator(GraspTask(target, "lift the blue block"), OBJECTS, REST_M, config)
    t = 0.0
    while t <= until:
        state = ev.update(t, heights_fn(t))
        if state.done:
            return state
        t = round(t + dt, 9)
    return state


def _lift(name, start_s, height_m=0.12, end_s=np.inf):
    i = OBJECTS.index(name)

    def heights(t):
        h = REST_M.copy()
        if start_s <= t < end_s:
            h[i] += height_m
        return h
    return heights


def test_success_after_lift_held_for_hold_s():
    state = _run(_lift("blue_cube", 1.0))
    assert state.success and state.done and state.terminated and not state.timed_out
    assert state.elapsed_s == pytest.approx(1.5, abs=0.003)
    assert state.lifted_since_s == pytest.approx(1.0, abs=0.003)
    assert state.wrong_object is None


def test_lift_threshold_is_the_resting_height_plus_10_cm():
    assert _run(_lift("blue_cube", 0.5, height_m=0.1005)).success
    state = _run(_lift("blue_cube", 0.5, height_m=0.099))
    assert not state.success and state.timed_out and not state.terminated
    assert state.elapsed_s == pytest.approx(20.0, abs=0.003)


def test_dropping_before_the_hold_restarts_the_clock():
    first = _lift("blue_cube", 1.0, end_s=1.4)
    second = _lift("blue_cube", 3.0)
    state = _run(lambda t: np.maximum(first(t), second(t)))
    assert state.success
    assert state.elapsed_s == pytest.approx(3.5, abs=0.003)


def test_lifting_another_object_fails_at_once():
    state = _run(_lift("red_cube", 2.0))
    assert state.done and state.terminated and not state.success
    assert state.wrong_object == "red_cube"
    assert state.elapsed_s == pytest.approx(2.0, abs=0.003)
    # lifting both (target held 0.4 s, then a second object comes up): wrong object
    both = _run(lambda t: np.maximum(_lift("blue_cube", 1.0)(t), _lift("green_cube", 1.4)(t)))
    assert both.wrong_object == "green_cube" and not both.success


def test_configurable_limits_and_frozen_final_state():
    cfg = TaskConfig(lift_height_m=0.05, hold_s=0.2, time_limit_s=3.0)
    assert _run(_lift("blue_cube", 1.0, height_m=0.06), config=cfg).elapsed_s == \
        pytest.approx(1.2, abs=0.003)
    ev = TaskEvaluator(GraspTask("blue_cube", "x"), OBJECTS, REST_M, cfg, start_time_s=10.0)
    assert ev.update(13.0, REST_M).timed_out
    final = ev.state
    assert ev.update(14.0, REST_M + 0.2) is final  # nothing changes once done


def test_target_must_be_in_the_scene():
    with pytest.raises(ValueError):
        TaskEvaluator(GraspTask("black_cube", "x"), OBJECTS, REST_M)


# -- a person's instruction: the evaluator follows the object the words name ------------------

def _task(text: str) -> GraspTask:
    """The task a person's words set in the five-object scene (no places, no sizes)."""
    return GraspTask(parse_instruction(text, OBJECTS) or "", text)


def test_instruction_words_set_the_target_with_the_generator_grammar():
    assert _task("pick up the red cube") == GraspTask("red_cube", "pick up the red cube")
    assert _task("could you grab the violet can?").target == "purple_cylinder"
    for nothing in ("pick up the orange cone", "pick up the red ball", "", "lift the cube"):
        assert _task(nothing).target == "", nothing


def test_a_new_target_mid_episode_is_scored_and_lifting_the_old_one_is_wrong():
    ev = TaskEvaluator(GraspTask("blue_cube", "lift the blue block"), OBJECTS, REST_M)
    ev.update(1.0, REST_M)
    state = ev.follow(_task("pick up the red cube"), 1.0, REST_M)
    assert state.target == "red_cube" and state.elapsed_s == 1.0 and not state.done
    assert ev.update(2.0, _lift("red_cube", 1.5)(2.0)).lifted_since_s == 2.0
    assert ev.update(2.6, _lift("red_cube", 1.5)(2.6)).success
    ev = TaskEvaluator(GraspTask("blue_cube", "x"), OBJECTS, REST_M)
    ev.follow(GraspTask("red_cube", "pick up the red cube"), 0.5, REST_M)
    assert ev.update(1.0, _lift("blue_cube", 0.0)(1.0)).wrong_object == "blue_cube"


def test_same_target_in_other_words_keeps_the_evaluation():
    ev = TaskEvaluator(GraspTask("red_cube", "lift the red cube"), OBJECTS, REST_M)
    ev.update(1.0, _lift("red_cube", 0.8)(1.0))
    state = ev.follow(GraspTask("red_cube", "grab the red box"), 1.1, REST_M)
    assert state.instruction == "grab the red box" and state.lifted_since_s == \
        pytest.approx(1.0)
    assert ev.update(1.5, _lift("red_cube", 0.8)(1.5)).success


def test_no_target_waits_without_time_limit_and_lifting_is_not_wrong():
    """An episode waiting for a person, or told of an object the scene lacks."""
    cfg = TaskConfig(time_limit_s=2.0)
    ev = TaskEvaluator(GraspTask("", ""), OBJECTS, REST_M, cfg)
    for t in (1.0, 5.0):
        state = ev.update(t, _lift("green_cube", 0.0)(t))
        assert not state.has_target and not state.done and state.wrong_object is None
    nothing = _task("pick up the orange cone")
    state = ev.follow(nothing, 5.0, REST_M)
    assert state.instruction == "pick up the orange cone" and not state.has_target
    assert not ev.update(9.0, REST_M).done
    # The first instruction naming an object starts the clock (and the time limit) then.
    ev.follow(_task("pick up the red cube"), 10.0, REST_M)
    assert not ev.update(11.9, REST_M).timed_out
    assert ev.update(12.0, REST_M).timed_out


def test_after_the_end_an_instruction_starts_a_new_evaluation_in_the_scene_as_it_is():
    ev = TaskEvaluator(GraspTask("blue_cube", "x"), OBJECTS, REST_M)
    held = _lift("blue_cube", 1.0)
    ev.update(1.0, held(1.0))
    assert ev.update(1.6, held(1.6)).success
    state = ev.follow(GraspTask("red_cube", "pick up the red cube"), 2.0, held(2.0))
    assert state.target == "red_cube" and not state.done and state.elapsed_s == 0.0
    # The blue cube still held up is its new resting height: not a wrong object.
    assert not ev.update(2.5, held(2.5)).done
    lifted = held(3.0)
    lifted[OBJECTS.index("red_cube")] += 0.12
    assert ev.update(3.0, lifted).lifted_since_s == pytest.approx(1.0)
