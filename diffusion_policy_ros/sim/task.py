"""Language grasp tasks: instructions, their scoring, and the success evaluator.

An episode names one object of the scene in natural language ("lift the green
block") and succeeds when that object is lifted and held; lifting any other
object ends the episode as a wrong-object failure. Object names in the MJCF
are ``<colour>_<shape>`` (``red_cube``, ``yellow_cylinder``). Training sentences
fill ``TEMPLATES`` with the vocabulary's seen words; ``HELD_OUT_TEMPLATES`` and the
held-out words are for evaluation only (``instructions.vocabulary``).

Which object a person's words mean is decided by ``instructions.referring``, with the
objects' places and sizes when the scene is at hand (``SimulationRuntime``, with what
was said before in the episode): the simulation then grades the object their words
name, whatever it chose itself. A task whose target is "" has nothing to score: no
instruction yet, or one that names no object of the scene, or several alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from diffusion_policy_ros.instructions.referring import Referent, parse_reference, resolve
from diffusion_policy_ros.instructions.vocabulary import COLOURS, SHAPES, describe, seen_words

#: Canonical colour -> the words training sentences use for it.
COLOUR_WORDS = seen_words(COLOURS)
#: Canonical shape (the suffix of the object name) -> the nouns training sentences use.
SHAPE_WORDS = seen_words(SHAPES)
#: Sentence patterns of the training data; ``{colour}`` and ``{shape}`` take one word each.
TEMPLATES = (
    "pick up the {colour} {shape}",
    "grasp the {colour} {shape}",
    "lift the {colour} {shape}",
    "grab the {colour} {shape}",
    "take the {colour} {shape}",
    "pick the {colour} {shape} up",
    "raise the {colour} {shape}",
    "lift the {colour} {shape} off the table",
    "please pick up the {colour} {shape}",
    "could you grasp the {colour} {shape}?",
    "grab the {shape} that is {colour}",
    "pick up the {shape}, the {colour} one",
)
#: Sentence patterns no training sentence uses: evaluation of held-out phrasing.
HELD_OUT_TEMPLATES = (
    "would you mind picking up that {colour} {shape}",
    "hand me the {colour} {shape}",
    "i need the {colour} {shape}, lift it",
    "get hold of the {shape} coloured {colour}",
)


def instruction_for(object_name: str, rng: np.random.Generator,
                    held_out: bool = False) -> str:
    """A random sentence asking to grasp ``object_name``: a training template with seen
    words, or (``held_out``) a held-out template with held-out words where there are."""
    colour, shape = describe(object_name)
    templates: tuple[str, ...]
    if held_out:
        templates = HELD_OUT_TEMPLATES
        colours = COLOURS[colour].held_out or COLOURS[colour].seen
        shapes = SHAPES[shape].held_out or SHAPES[shape].seen
    else:
        templates, colours, shapes = TEMPLATES, COLOUR_WORDS[colour], SHAPE_WORDS[shape]
    template = templates[rng.integers(len(templates))]
    return template.format(colour=colours[rng.integers(len(colours))],
                           shape=shapes[rng.integers(len(shapes))])


def referents(object_names: Sequence[str], positions_m=None, sizes_m=None) -> list[Referent]:
    """The objects as words refer to them; without positions and sizes every place and
    size relation ties (so only colour and shape can pick one)."""
    n = len(object_names)
    positions = np.zeros((n, 3)) if positions_m is None else np.asarray(positions_m, float)
    sizes = np.zeros(n) if sizes_m is None else np.asarray(sizes_m, float)
    return [Referent(name, *describe(name), float(size),
                     (float(xyz[0]), float(xyz[1]), float(xyz[2])))
            for name, xyz, size in zip(object_names, positions, sizes, strict=True)]


def parse_instruction(text: str, object_names: Sequence[str]) -> str | None:
    """The one object of ``object_names`` that ``text`` names by colour and shape, or
    None (nothing or more than one fits, two colours, ...)."""
    return resolve(parse_reference(text), referents(object_names)).target

@dataclasses.dataclass(frozen=True)
class GraspTask:
    """What one episode asks for (``target`` "": nothing the scene has, or no instruction)."""

    target: str
    instruction: str


SWITCH_AFTER_S = 1.0
"""Sim time (s) after the episode start at which ``dpr eval --instructions switch`` (in
process or ``--ros``) replaces the first, other object's instruction by the task's."""


def other_task(target: str, object_names: Sequence[str], rng: np.random.Generator) -> GraspTask:
    """A task for a uniformly chosen object other than ``target`` (a wrong or a first,
    later replaced, instruction)."""
    others = [n for n in object_names if n != target]
    other = others[rng.integers(len(others))]
    return GraspTask(other, instruction_for(other, rng))


def wrong_instruction(target: str, object_names: Sequence[str], seed: int) -> str:
    """The other object's instruction ``dpr eval --instructions wrong | switch`` gives
    episode ``seed`` (in process and through the nodes alike)."""
    return other_task(target, object_names, np.random.default_rng([seed, 7])).instruction


def sample_task(object_names: Sequence[str], rng: np.random.Generator) -> GraspTask:
    """A uniformly chosen target among ``object_names`` and a random instruction for it."""
    target = object_names[int(rng.integers(len(object_names)))]
    return GraspTask(target, instruction_for(target, rng))


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    """When a grasp episode ends."""

    lift_height_m: float = 0.10
    """An object counts as lifted this far above its resting height (centre, m)."""
    hold_s: float = 0.5
    """The target must stay lifted this long for success (s)."""
    time_limit_s: float = 20.0
    """Episode length limit (sim time, s)."""


@dataclasses.dataclass(frozen=True)
class TaskState:
    """The evaluation of one episode so far."""

    target: str
    instruction: str
    elapsed_s: float
    success: bool
    wrong_object: str | None
    """Name of a non-target object that was lifted (ends the episode), else None."""
    timed_out: bool
    lifted_since_s: float | None
    """Episode time since when the target has been lifted without interruption."""

    @property
    def done(self) -> bool:
        return self.success or self.wrong_object is not None or self.timed_out

    @property
    def has_target(self) -> bool:
        """False while there is nothing to score (no instruction, or one naming no object)."""
        return bool(self.target)

    @property
    def terminated(self) -> bool:
        """Ended by the task itself (success or wrong object), not by the time limit."""
        return self.success or self.wrong_object is not None


class TaskEvaluator:
    """Scores an episode from object heights, one call per simulation step.

    Heights come in ``object_names`` order; resting heights are the heights at
    the start of the episode (objects placed and settled). Once done, the state
    no longer changes (until ``follow`` gives a new task). Without a target
    (``task.target`` "") nothing is scored and the time limit does not run.
    """

    def __init__(self, task: GraspTask, object_names: Sequence[str], rest_heights_m,
                 config: TaskConfig | None = None, start_time_s: float = 0.0):
        self.config = config or TaskConfig()
        self.object_names = tuple(object_names)
        self._check(task)
        self.task = task
        self._rest_m = np.asarray(rest_heights_m, dtype=np.float64).reshape(len(object_names))
        self.start_time_s = float(start_time_s)
        self.state = TaskState(task.target, task.instruction, 0.0, False, None, False, None)

    def _check(self, task: GraspTask) -> None:
        if task.target and task.target not in self.object_names:
            raise ValueError(f"target '{task.target}' is not among {self.object_names}")

    @property
    def _target(self) -> int:
        return self.object_names.index(self.task.target)

    def follow(self, task: GraspTask, time_s: float, heights_m) -> TaskState:
        """Score against ``task`` from ``time_s`` on: a person's (new) instruction.

        While the episode runs, a new target keeps its start and resting heights (the
        same target only takes the new words); the first target of an episode that had
        none starts its clock; after the end, a new evaluation begins in the scene as it
        is (the current heights become the resting ones). Target "" suspends scoring.
        """
        self._check(task)
        s = self.state
        if s.done:
            self._rest_m = np.asarray(heights_m, dtype=np.float64).reshape(len(self.object_names))
            self.start_time_s = float(time_s)
        elif not s.has_target:
            self.start_time_s = float(time_s)
        elif task.target == s.target:
            self.task = task
            self.state = dataclasses.replace(s, instruction=task.instruction)
            return self.state
        self.task = task
        elapsed = float(time_s) - self.start_time_s
        self.state = TaskState(task.target, task.instruction, elapsed, False, None, False, None)
        return self.state

    def update(self, time_s: float, heights_m) -> TaskState:
        """Advance the evaluation to ``time_s`` with the objects' current centre heights."""
        s = self.state
        if s.done or not s.has_target:
            return s
        c = self.config
        elapsed = float(time_s) - self.start_time_s
        lifted = np.asarray(heights_m, dtype=np.float64) - self._rest_m >= c.lift_height_m
        wrong = next((self.object_names[i] for i in np.flatnonzero(lifted) if i != self._target),
                     None)
        since: float | None = s.lifted_since_s if s.lifted_since_s is not None else elapsed
        since = since if lifted[self._target] else None
        success = wrong is None and since is not None and elapsed - since >= c.hold_s
        timed_out = not success and wrong is None and elapsed >= c.time_limit_s
        self.state = dataclasses.replace(s, elapsed_s=elapsed, success=success,
                                         wrong_object=wrong, timed_out=timed_out,
                                         lifted_since_s=since)
        return self.state
