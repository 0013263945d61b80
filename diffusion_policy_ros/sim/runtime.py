"""``SimulationRuntime``: scene, camera, task and tracker on one simulation clock.

Both drivers of the simulation use this class, so collection, evaluation and
the ROS system run the same physics, images and success rules:

* ``GraspEnv`` (in process, faster than real time) submits action chunks to
  the runtime's ``PdTracker`` and calls ``advance``: one tracker tick per
  physics step (2 ms = the tracker's 500 Hz), then renders one frame per
  observation.
* ``sim_node`` applies the efforts and gripper command it receives from
  ``pd_tracker_node`` with ``step`` on its 500 Hz timer and, whenever ``frame_due()``
  (30 Hz in sim time), captures the scene for its render thread
  (``schedule_frame``, then ``finish_frame`` with the drawn arrays).

The task is evaluated after every physics step, so success and failure times
do not depend on the control or camera rate.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from diffusion_policy_ros.config import CONFIG_DIR, load_config
from diffusion_policy_ros.control import (
    ActionChunk,
    ChunkDecision,
    PdTracker,
    PdTrackerConfig,
    TrackerCommand,
)
from diffusion_policy_ros.instructions.descriptions import (
    describe_with_colour,
    describe_without_colour,
)
from diffusion_policy_ros.instructions.dialogue import Dialogue
from diffusion_policy_ros.instructions.referring import (
    AMBIGUOUS,
    Referent,
    parse_reference,
    resolve,
)
from diffusion_policy_ros.perception.geometry import CameraModel
from diffusion_policy_ros.perception.image_decoding import RawImage
from diffusion_policy_ros.sim.camera import (
    DepthNoise,
    KinectCamera,
    RgbdFrame,
    bgra8_image,
    camera_model_for,
    depth_16uc1_image,
)
from diffusion_policy_ros.sim.object_sets import load_object_set
from diffusion_policy_ros.sim.scene import ArmScene
from diffusion_policy_ros.sim.sim_config import SimConfig
from diffusion_policy_ros.sim.task import (
    GraspTask,
    TaskEvaluator,
    TaskState,
    referents,
    sample_task,
)

#: Independent random streams derived from an episode seed (the layout uses the seed itself).
_TASK_STREAM, _NOISE_STREAM, _WORDS_STREAM = 1, 2, 3


def seed_task(seed: int, object_names) -> GraspTask:
    """The task episode ``seed`` samples when none is given (target and instruction)."""
    return sample_task(object_names, np.random.default_rng([seed, _TASK_STREAM]))


def load_tracker_config(path=CONFIG_DIR / "pd_tracker.yaml") -> PdTrackerConfig:
    """The ``pd_tracker_node`` parameters, so the sim tracks like the ROS system."""
    return load_config(PdTrackerConfig, path, "pd_tracker_node")


@dataclasses.dataclass(frozen=True)
class CameraFrame:
    """One Kinect-like frame as the driver publishes it (``bgra8`` + ``16UC1`` mm)."""

    stamp_s: float
    color: RawImage
    depth: RawImage
    camera: CameraModel


class SimulationRuntime:
    """An episode of the grasp task: physics, camera frames, task state, tracker.

    Call ``reset`` before anything else. Not thread-safe: one thread drives it
    (or the caller locks).
    """

    def __init__(self, config: SimConfig | None = None,
                 tracker_config: PdTrackerConfig | None = None,
                 model: mujoco.MjModel | None = None, with_camera: bool = True):
        self.config = config or SimConfig()
        self.tracker_config = tracker_config or load_tracker_config()
        if model is None:
            model = load_object_set(self.config.object_set)
        varied = self.config.object_set == "varied"
        self.scene = ArmScene(model, tuple(self.config.objects_on_table) if varied else None)
        width, height = self.config.resolution
        self.camera = KinectCamera(self.scene.model, width, height) if with_camera else None
        self.camera_model = camera_model_for(self.scene.model, width, height)
        #: Applied here, not in the camera, so that its random stream restarts with each episode.
        self.depth_noise = DepthNoise() if self.config.depth_noise else None
        self.frame_period_s = 1.0 / self.config.camera_rate_hz
        self._body_ids = np.array([o.body_id for o in self.scene.objects])
        self._next_seed = self.config.seed
        self.episode_seed: int | None = None
        self.task: TaskEvaluator | None = None
        self.dialogue = Dialogue()
        """What the person said this episode: corrections resolve against it."""
        self.ambiguity = ""
        """Why the last instruction named no one object because several fit, or ''."""
        self.tracker: PdTracker | None = None

    # -- episodes -----------------------------------------------------------------------------

    def reset(self, seed: int | None = None, task: GraspTask | None = None,
              instruction: str | None = None) -> TaskState:
        """New layout, task and tracker from ``seed`` (None: the next seed in sequence).

        ``task`` overrides the sampled target and instruction (its target must
        be an object of the scene, or "" to score nothing until ``follow_instruction``);
        ``instruction`` instead: a person's words, resolved in the new layout.
        The clock restarts at 0.
        """
        seed = self._next_seed if seed is None else int(seed)
        self._next_seed = seed + 1
        self.episode_seed = seed
        self.scene.reset(seed=seed, settle_s=self.config.settle_s)
        self.dialogue.reset()
        self.ambiguity = ""
        if instruction is not None:
            task = self._hear(instruction)
        elif task is None:
            task = self._unique_words(seed_task(seed, self.scene.on_table_names), seed)
        if task.target and self.dialogue.target is None:  # the episode's own words
            self.dialogue.settle(parse_reference(task.instruction), task.target,
                                 self.referents())
        self.task = TaskEvaluator(task, self.scene.object_names, self._object_heights_m(),
                                  self.config.task_config(), start_time_s=self.time_s)
        self._noise_rng = np.random.default_rng([seed, _NOISE_STREAM])
        self._next_frame_s = self.time_s
        self.tracker = PdTracker(self.tracker_config)
        #: What the tracker commanded on the last physics step (None before the first).
        self.last_command: TrackerCommand | None = None
        self._tick()  # the tracker has seen the first joint state: it holds the arm here
        return self.task.state

    def follow_instruction(self, text: str) -> TaskState:
        """Score the episode against the object ``text`` names in the scene as it is now,
        after what was said this episode ("no, the blue one"): ``TaskEvaluator.follow``.
        Words that name no object, or several alike, suspend scoring."""
        assert self.task is not None, "call reset() first"
        return self.task.follow(self._hear(text), self.time_s, self._object_heights_m())

    def _hear(self, text: str) -> GraspTask:
        """The task ``text`` sets after what was said, in the layout as it is now (target
        "" when it names no one object; ``ambiguity`` says which fit alike)."""
        resolution = self.dialogue.hear(text, self.referents())
        self.ambiguity = resolution.reason if resolution.status == AMBIGUOUS else ""
        return GraspTask(resolution.target or "", text)

    def referents(self) -> list[Referent]:
        """The objects on the table as words refer to them, where they are now."""
        on_table = self.scene.on_table
        return referents([o.name for o in on_table],
                         self.scene.data.xpos[[o.body_id for o in on_table]],
                         [o.size_m for o in on_table])

    def _unique_words(self, task: GraspTask, seed: int) -> GraspTask:
        """The task with words that name its object alone in this layout: its own sentence
        where the colour and shape do ("pick up the red cube"), else one with a size, a
        place or a neighbour too ("pick up the small red cube")."""
        objects = self.referents()
        if resolve(parse_reference(task.instruction), objects).target == task.target:
            return task
        rng = np.random.default_rng([seed, _WORDS_STREAM])
        words = describe_with_colour(task.target, objects, rng) or \
            describe_without_colour(task.target, objects, rng)
        return GraspTask(task.target, words or task.instruction)

    @property
    def time_s(self) -> float:
        return self.scene.time_s

    @property
    def task_state(self) -> TaskState:
        assert self.task is not None, "call reset() first"
        return self.task.state

    def _object_heights_m(self) -> np.ndarray:
        return self.scene.data.xpos[self._body_ids, 2]

    # -- physics ------------------------------------------------------------------------------

    def step(self, effort_nm, gripper_opening_m: float) -> TaskState:
        """One physics step with the given arm efforts (N m) and gripper opening (m)."""
        self.scene.step(effort_nm, gripper_opening_m)
        assert self.task is not None, "call reset() first"
        return self.task.update(self.time_s, self._object_heights_m())

    def submit_chunk(self, chunk: ActionChunk) -> ChunkDecision:
        """Hand an action chunk to the tracker at the current sim time."""
        assert self.tracker is not None, "call reset() first"
        return self.tracker.submit_chunk(chunk, self.time_s)

    def _tick(self) -> TrackerCommand:
        joints = self.scene.joint_positions()
        rates = self.scene.joint_velocities()
        now = self.time_s
        assert self.tracker is not None, "call reset() first"
        return self.tracker.tick(now, joints[:6].tolist(), rates[:6].tolist(), now,
                                 float(joints[6]))

    def tracked_step(self) -> TrackerCommand:
        """One tracker tick on the measured state, then one physics step with its command."""
        command = self.last_command = self._tick()
        gripper = command.gripper_opening_m
        if gripper is None:
            gripper = float(self.scene.joint_positions()[6])
        self.step(command.effort_nm, gripper)
        return command

    def advance(self, duration_s: float, after_step=None) -> TaskState:
        """Run the tracker and physics for ``duration_s`` (rounded to whole steps).

        ``after_step(runtime)`` is called after every physics step (e.g. to record
        ``joint_states`` at the physics rate).
        """
        for _ in range(int(round(duration_s / self.scene.timestep_s))):
            self.tracked_step()
            if after_step is not None:
                after_step(self)
        return self.task_state

    # -- camera -------------------------------------------------------------------------------

    def frame_due(self) -> bool:
        """A camera frame is due at the current time (``camera_rate_hz`` in sim time)."""
        return self.time_s >= self._next_frame_s - 1e-9

    def schedule_frame(self) -> float:
        """Take the frame that is due now: returns its time (s) and schedules the next.

        ``render_frame`` does this itself; a driver that renders elsewhere
        (``sim_node``'s render thread) calls it, captures the scene, and later hands the
        drawn arrays to ``finish_frame``.
        """
        now = self.time_s
        periods = np.floor(now / self.frame_period_s + 1e-9) + 1.0
        self._next_frame_s = float(periods * self.frame_period_s)
        return now

    def finish_frame(self, time_s: float, rgbd: RgbdFrame) -> CameraFrame:
        """The driver's images of a drawn frame, with this episode's depth noise.

        The noise stream is the episode's: finish frames in the order they were
        scheduled, and all of an episode's frames before the next ``reset``.
        """
        depth = rgbd.depth_m
        if self.depth_noise is not None:
            depth = self.depth_noise.apply(depth, self._noise_rng)
        return CameraFrame(time_s, bgra8_image(rgbd.rgb), depth_16uc1_image(depth),
                           self.camera_model)

    def render_frame(self) -> CameraFrame:
        """Render the camera now (with this episode's depth noise); schedules the next frame."""
        if self.camera is None:
            raise RuntimeError("this runtime was built with_camera=False")
        return self.finish_frame(self.schedule_frame(), self.camera.render_arrays(self.scene.data))

    def close(self) -> None:
        if self.camera is not None:
            self.camera.close()
