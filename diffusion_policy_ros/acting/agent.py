"""``PolicyAgent``: the acting loop of a diffusion policy, the same for every caller.

``policy_node``, ``dpr eval`` and the RL rollouts act through it, so they act alike:

- observations come in by stamp: ``add_image`` + ``add_points`` of one frame (paired
  by their equal stamps), ``add_joint_state``, or ``add_observation`` for a whole frame
  as the simulation makes it; an ``ObservationHistory`` keeps them.
- ``restart(instruction, now_ns)`` starts a task (every instruction does, the same
  words again too, and every episode): inputs stamped before ``now_ns`` are dropped, so
  the first chunks are padded from the task's own first frame as in training and never
  see the previous episode; the chunk rules forget the previous task; the noise stream
  starts again. With ``read_instructions`` the words are read first
  (``instructions.dialogue.WordsDialogue``): a correction ("no, the blue one") becomes
  the sentence of the object in force, and words that name no object or correct
  nothing hold the arm (``UNREAD_INSTRUCTION``, with why).
- ``act(now_ns)`` selects To frames one ``action_dt_s`` apart ending at the newest,
  runs the policy, applies the chunk rules and hands back a ``Chunk``, or a ``Refusal``
  that says why not (no instruction, stale or missing observations, non-finite input
  or output).
- an image or cloud of another size than the loaded checkpoint's ``image_size`` /
  ``num_points`` is dropped (counted) and, until a fitting frame comes, every ``act``
  refuses with ``OBSERVATION_MISMATCH``: one sentence with both values and the
  ``rgbd_sync_node`` parameter to change, rather than a shape error per chunk.

Initial noise (``noise``): ``stream`` draws new noise for every chunk from a generator
seeded with ``seed`` at every task, so a task is reproducible and a hover cannot become
a fixed point of sampling; ``fixed`` starts every chunk from the same seeded noise;
``fresh`` draws unseeded noise.

A caller that runs the policy itself (the RL rollouts, batched over environments,
with exploration) uses the two halves of ``act``: ``select`` and ``finish``.

Threading: ``add_*`` may run on another thread than the rest (the history locks);
``restart``, ``act``, ``select`` and ``finish`` belong to one thread.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

import numpy as np

from diffusion_policy_ros.acting.observation_history import (
    ObservationHistory,
    Refusal,
    Selection,
)
from diffusion_policy_ros.acting.rules import ChunkRules, RuleEvent
from diffusion_policy_ros.instructions.dialogue import Reading, WordsDialogue
from diffusion_policy_ros.monitoring import RollingStats

NO_INSTRUCTION = "no_instruction"
BAD_OBSERVATION = "bad_observation"
NON_FINITE_ACTION = "non_finite_action"
#: Words the agent does not act on: they name no object, or correct nothing.
UNREAD_INSTRUCTION = "instruction_not_understood"
#: Observations of another image size or point count than the checkpoint's.
OBSERVATION_MISMATCH = "observation_mismatch"
#: Not a refusal to act: the chunk belonged to a task that ended while it was computed.
DISCARDED = "discarded_after_restart"
NOISE_MODES = ("stream", "fixed", "fresh")


class ConfiguredPolicy(Protocol):
    """What ``load``, ``select`` and ``finish`` need of a policy: ``config`` gives
    ``n_obs_steps`` and ``action_dt_s``. A caller of ``select`` and ``finish`` alone (it
    runs the policy itself) may hand any object with that ``config`` (a
    ``DiffusionPolicy``)."""

    config: Any


class ChunkPolicy(ConfiguredPolicy, Protocol):
    """What ``act`` runs: ``policy.runner.PolicyRunner``."""

    def predict(self, observations: Sequence[Mapping[str, np.ndarray]], instruction: str,
                noise: Any = None) -> np.ndarray:
        """(T, D) joint targets for the To observations, oldest first."""

    def noise_stream(self, seed: int) -> Any:
        """A seeded source of initial noise for successive ``predict`` calls."""


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A chunk to execute: row k is for the newest observation's stamp + k * action_dt_s."""

    actions: np.ndarray
    selection: Selection
    """The frames it was conditioned on."""
    task: int
    """The task it belongs to (``PolicyAgent.task`` when it was selected)."""
    events: tuple[RuleEvent, ...]
    """What the chunk rules did to it."""
    predict_ms: float

    @property
    def stamp_ns(self) -> int:
        return self.selection.stamp_ns


class PolicyAgent:
    """Observation history, task, noise and chunk rules of one acting loop."""

    def __init__(self, joint_names: Sequence[str], *, max_obs_age_s: float = 0.5,
                 noise: str = "stream", seed: int = 0, read_instructions: bool = True):
        if noise not in NOISE_MODES:
            raise ValueError(f"noise must be one of {NOISE_MODES}, got {noise!r}")
        self.history = ObservationHistory(joint_names, keep_s=max_obs_age_s + 1.0)
        self.max_obs_age_s = max_obs_age_s
        self.noise = noise
        self.seed = seed
        self.policy: ConfiguredPolicy | None = None
        self.rules = ChunkRules()
        self.instruction = ""
        """The sentence the policy is conditioned on ('' while it holds)."""
        self.words = ""
        """The words of the task, as they were said."""
        self.dialogue = WordsDialogue() if read_instructions else None
        self.reading = Reading("")
        self._stream = None  # the task's noise generator, made at its first chunk
        self.discarded_after_restart = 0
        self.history_short_total = 0
        self.history_offset_ms = RollingStats()
        self.mismatch = ""
        """Why the newest image or cloud did not fit the checkpoint; '' once one fits."""
        self.mismatched = collections.Counter[str]()

    @property
    def task(self) -> int:
        """Tasks started so far."""
        return self.history.generation

    # -- policy -------------------------------------------------------------------------------

    def load(self, policy: ConfiguredPolicy, rules: ChunkRules | None = None) -> None:
        """Act with ``policy`` under ``rules`` (None: none) from now on; ``act`` needs a
        ``ChunkPolicy``, ``select`` and ``finish`` only its ``config``."""
        c = policy.config
        self.history.keep_s = max(self.history.keep_s, (c.n_obs_steps - 1) * c.action_dt_s
                                  + self.max_obs_age_s + 0.5)
        self.rules = rules if rules is not None else ChunkRules()
        self._stream = None
        self.mismatch = ""
        self.policy = policy

    def unload(self) -> None:
        self.policy = None

    # -- inputs -------------------------------------------------------------------------------

    def restart(self, instruction: str, now_ns: int, seed: int | None = None,
                new_dialogue: bool = False) -> None:
        """Start a task for ``instruction`` at ``now_ns``; ``seed``: its noise seed (None:
        the agent's ``seed``); ``new_dialogue``: nothing said before counts (an episode's
        start), so a correction has nothing to correct."""
        self.history.restart(now_ns)
        self.words = instruction
        self.reading = Reading(instruction)
        if self.dialogue is not None:
            if new_dialogue:
                self.dialogue.reset()
            if instruction:
                self.reading = self.dialogue.read(instruction)
        self.instruction = self.reading.sentence
        if seed is not None:
            self.seed = seed
        self._stream = None
        self.rules.restart()

    def add_image(self, stamp_ns: int, image: np.ndarray) -> bool:
        """Keep a frame's (H, W, 3) uint8 RGB image; True when it completes the frame.
        An image of another size than the checkpoint's is dropped (``mismatch``)."""
        if not self.fits_image(image):
            self._mismatched("image_size", self._image_mismatch(image))
            return False
        return self._paired(self.history.add_image(stamp_ns, image))

    def add_points(self, stamp_ns: int, points: np.ndarray, colors: np.ndarray) -> bool:
        """Keep a frame's (N, 3) points (base frame, m) and colours; True when they
        complete the frame. Another count than the checkpoint's is dropped (``mismatch``)."""
        expected = self._expected("num_points")
        if expected is not None and len(points) != expected:
            self._mismatched("num_points", (
                f"observation/points has {len(points)} points where the checkpoint expects "
                f"{expected}: set rgbd_sync_node's num_points to {expected} "
                f"(config/rgbd_sync.yaml), or load a checkpoint trained with {len(points)}"))
            return False
        return self._paired(self.history.add_points(stamp_ns, points, colors))

    def fits_image(self, image: np.ndarray) -> bool:
        """The image has the loaded checkpoint's size (True without a checkpoint)."""
        expected = self._expected("image_size")
        return expected is None or tuple(image.shape[:2]) == tuple(expected)

    def _image_mismatch(self, image: np.ndarray) -> str:
        h, w = image.shape[:2]
        eh, ew = self._expected("image_size")
        return (f"observation/image is {h}x{w} px (height x width) where the checkpoint "
                f"expects {eh}x{ew}: set rgbd_sync_node's image_size to [{eh}, {ew}] "
                f"(config/rgbd_sync.yaml), or load a checkpoint trained at {h}x{w}")

    def _expected(self, field: str):
        return getattr(self.policy.config, field, None) if self.policy is not None else None

    def _mismatched(self, what: str, detail: str) -> None:
        self.mismatched[what] += 1
        self.mismatch = detail

    def _paired(self, completed: bool) -> bool:
        if completed:
            self.mismatch = ""
        return completed

    def add_joint_state(self, stamp_ns: int, names: Sequence[str],
                        positions: Sequence[float]) -> str:
        """Keep a joint state; '' or why it was ignored."""
        return self.history.add_joint_state(stamp_ns, names, positions)

    def add_observation(self, stamp_ns: int, observation: Mapping[str, np.ndarray]) -> None:
        """A whole frame at once: ``image``, ``points``, ``point_colors`` and
        ``joint_positions`` (in the agent's joint order), all of ``stamp_ns``."""
        # An ndarray: indexed and sized as the Sequence the history reads.
        positions = cast(Sequence[float], observation["joint_positions"])
        self.history.add_joint_state(stamp_ns, self.history.joint_names, positions)
        self.add_image(stamp_ns, observation["image"])
        self.add_points(stamp_ns, observation["points"], observation["point_colors"])

    def awaiting_first_frame(self, now_ns: int) -> bool:
        """No frame has paired since a task began at most ``max_obs_age_s`` ago: normal at
        every task's start, not a camera that stopped."""
        return self.history.awaiting_first_frame(now_ns, self.max_obs_age_s)

    # -- acting -------------------------------------------------------------------------------

    def act(self, now_ns: int, meanwhile: Callable[[], object] | None = None
            ) -> Chunk | Refusal:
        """The chunk for ``now_ns``, or why there is none. ``meanwhile`` runs once the
        policy has computed it, before the rules see it: a caller that starts tasks on
        this thread starts one that came meanwhile there, and the chunk, of the task that
        ended, is discarded (``DISCARDED``, counted)."""
        if self.policy is None:
            raise RuntimeError("no policy loaded: PolicyAgent.load before act")
        # act runs the policy: its caller loaded a ChunkPolicy (load's doc).
        policy = cast(ChunkPolicy, self.policy)
        task = self.task
        selection = self._select(policy, now_ns)
        if isinstance(selection, Refusal):
            return selection
        start = time.perf_counter()
        try:
            actions = policy.predict(selection.observations, self.instruction,
                                     noise=self._chunk_noise(policy))
        except ValueError as exc:  # observations that do not fit the checkpoint
            return Refusal(BAD_OBSERVATION, str(exc))
        predict_ms = (time.perf_counter() - start) * 1e3
        if not np.isfinite(actions).all():
            return Refusal(NON_FINITE_ACTION, "the policy produced NaN or inf actions")
        if meanwhile is not None:
            meanwhile()
        if self.task != task:
            self.discarded_after_restart += 1
            return Refusal(DISCARDED, "a new task began while the chunk was computed")
        return self.finish(selection, actions, predict_ms)

    def select(self, now_ns: int) -> Selection | Refusal:
        """The frames a chunk for ``now_ns`` is conditioned on (``act``'s first half)."""
        if self.policy is None:
            raise RuntimeError("no policy loaded: PolicyAgent.load before select")
        return self._select(self.policy, now_ns)

    def finish(self, selection: Selection, actions: np.ndarray,
               predict_ms: float = 0.0) -> Chunk:
        """The chunk to execute for the policy's ``actions`` on ``selection``: the rules
        applied (``act``'s second half)."""
        newest = selection.observations[-1]
        actions = self.rules.apply(actions, newest["joint_positions"],
                                   selection.stamp_ns * 1e-9)
        self.history_short_total += selection.short
        for offset_s in selection.offsets_s[:-1]:
            self.history_offset_ms.add(abs(offset_s) * 1e3)
        return Chunk(actions, selection, self.task, tuple(self.rules.events), predict_ms)

    def _select(self, policy: ConfiguredPolicy, now_ns: int) -> Selection | Refusal:
        if self.reading.reason:
            return Refusal(UNREAD_INSTRUCTION, self.reading.reason)
        if not self.instruction:
            return Refusal(NO_INSTRUCTION, "no instruction yet")
        c = policy.config
        selection = self.history.select(now_ns, c.n_obs_steps, c.action_dt_s,
                                        self.max_obs_age_s)
        if isinstance(selection, Refusal) and self.mismatch:
            return Refusal(OBSERVATION_MISMATCH, self.mismatch)
        return selection

    def _chunk_noise(self, policy: ChunkPolicy):
        if self.noise == "fixed":
            return self.seed
        if self.noise == "fresh":
            return None
        if self._stream is None:
            self._stream = policy.noise_stream(self.seed)
        return self._stream

    # -- statistics ---------------------------------------------------------------------------

    def statistics(self) -> dict[str, int | float]:
        """Counters of the history, the chunks and the rules, for diagnostics."""
        h = self.history
        pending_images, pending_points = h.pending
        return {
            "history_restarts": h.generation,
            "frames": len(h),
            "images_total": h.images_total,
            "points_total": h.points_total,
            "paired_total": h.paired_total,
            "pending_images": pending_images,
            "pending_points": pending_points,
            "non_finite_frames_total": h.non_finite_frames,
            "joint_states_total": h.joint_states_total,
            **{f"dropped_{reason}": n for reason, n in sorted(h.drops.items())},
            **{f"dropped_{what}_mismatch": n for what, n in sorted(self.mismatched.items())},
            "discarded_after_restart": self.discarded_after_restart,
            "history_short_total": self.history_short_total,
            "history_offset_ms_p99": self.history_offset_ms.percentile(99),
            **self.rules.statistics(),
        }
