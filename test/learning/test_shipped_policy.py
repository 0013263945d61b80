"""The shipped policy (checkpoints/grasp_unet) grasps what it is told, closed loop in MuJoCo.

In-process ``dpr eval`` on held-out seeds (demonstrations used 1000-2199): the
same perception, policy and tracker code as the nodes. Episodes are deterministic
for a seed (seeded layout, instruction and sampling noise), but CPUs may differ in
the last bits of a float, so a borderline episode may flip: each test asks for a
majority, and the 100-episode figures are in the README.
"""

import pytest

from diffusion_policy_ros.config import SHIPPED_CHECKPOINT
from diffusion_policy_ros.learning.evaluate import evaluate
from diffusion_policy_ros.sim.task import parse_instruction

OBJECTS = ["red_cube", "green_cube", "blue_cube", "yellow_cylinder", "purple_cylinder"]

pytestmark = pytest.mark.slow


def _run(mode: str, episodes: int, seed: int = 5000):
    return evaluate(SHIPPED_CHECKPOINT, episodes=episodes, seed=seed, instruction_mode=mode,
                    num_threads=2, progress=False)[1]


def test_lifts_the_object_the_instruction_names():
    outcomes = _run("task", 3)
    assert sum(o.success for o in outcomes) >= 2, outcomes
    assert all(o.wrong_object is None for o in outcomes if o.success)


def test_follows_the_words_not_a_prior_with_a_wrong_instruction():
    """Told to lift another object, it lifts that one: a wrong-object 'failure'."""
    outcomes = _run("wrong", 3)
    named = [parse_instruction(o.instruction, OBJECTS) for o in outcomes]
    assert all(n is not None and n != o.target for n, o in zip(named, outcomes, strict=True))
    assert sum(o.wrong_object == n for n, o in zip(named, outcomes, strict=True)) >= 2, outcomes


def test_pursues_a_new_instruction():
    """One object named first, the episode's own target 1 s later: the target is lifted."""
    outcomes = _run("switch", 3)
    assert sum(o.success for o in outcomes) >= 2, outcomes
