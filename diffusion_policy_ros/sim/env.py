"""``GraspEnv``: the grasp task as a gymnasium-style environment (no gymnasium needed).

For collection, evaluation and RL in process, faster than real time. One
``step`` is one control period of the ROS system: the action chunk goes to the
same ``PdTracker`` that ``pd_tracker_node`` runs, physics and tracker advance
``control_period_s`` (one tick per 2 ms physics step), and the observation is
what ``rgbd_sync_node`` would publish for a Kinect frame taken then: the
``RgbdObservationPipeline`` turns the rendered ``bgra8`` + ``16UC1`` images into
the policy image and the fixed-size point cloud in ``base_link``.

The simulated camera is mounted where the pipeline's extrinsics
(``config/rgbd_sync.yaml``) say it is, so the points are exactly registered.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from diffusion_policy_ros.config import CONFIG_DIR, load_config
from diffusion_policy_ros.control import ActionChunk, PdTrackerConfig
from diffusion_policy_ros.perception.pipeline import RgbdObservationPipeline, RgbdSyncConfig
from diffusion_policy_ros.sim.camera import set_camera_pose
from diffusion_policy_ros.sim.runtime import CameraFrame, SimulationRuntime
from diffusion_policy_ros.sim.scene import JOINT_NAMES
from diffusion_policy_ros.sim.sim_config import SimConfig
from diffusion_policy_ros.sim.task import GraspTask


def load_sync_config(path=CONFIG_DIR / "rgbd_sync.yaml") -> RgbdSyncConfig:
    """The ``rgbd_sync_node`` parameters, so observations match the ROS system's."""
    return load_config(RgbdSyncConfig, path, "rgbd_sync_node")


class GraspEnv:
    """The grasp task with gymnasium's method shapes: ``reset`` and ``step`` (below).

    Observation dict: ``image`` (H, W, 3) uint8 RGB, ``points`` (N, 3) float32 in
    ``base_link`` (m), ``point_colors`` (N, 3) uint8, ``joint_positions`` (7,)
    (rad, gripper opening m), ``instruction`` str, ``stamp_s`` (sim time of the
    frame). Without ``render_observations`` the three camera entries are absent.
    Reward: 1 on the step that completes the task, else 0. ``terminated``:
    success or wrong object; ``truncated``: time limit.
    """

    def __init__(self, config: SimConfig | None = None,
                 sync_config: RgbdSyncConfig | None = None,
                 tracker_config: PdTrackerConfig | None = None):
        self.config = config or SimConfig()
        c = self.config
        self.runtime = SimulationRuntime(c, tracker_config, with_camera=c.render_observations)
        timestep = self.runtime.scene.timestep_s
        self.steps_per_period = int(round(c.control_period_s / timestep))
        if abs(self.steps_per_period * timestep - c.control_period_s) > 1e-9:
            raise ValueError(f"control_period_s {c.control_period_s} is not a whole number of "
                             f"physics steps of {timestep} s")
        #: Shape of the action chunk ``step`` takes: horizon x (6 joints + gripper).
        self.action_shape = (c.chunk_horizon, len(JOINT_NAMES))
        self._times_from_start_s = [k * c.chunk_dt_s for k in range(c.chunk_horizon)]
        self.pipeline: RgbdObservationPipeline | None = None
        if c.render_observations:
            self.pipeline = RgbdObservationPipeline(sync_config or load_sync_config())
            set_camera_pose(self.runtime.scene.model, self.pipeline.camera_to_base)
            assert self.runtime.camera is not None  # made for render_observations
            self.pipeline.set_camera(self.runtime.camera.camera_model)
        self._last_stamp_s = 0.0
        self._done = True
        #: Called with the runtime after every physics step (recording joint_states).
        self.after_physics_step: Callable[[SimulationRuntime], None] | None = None
        #: The camera frame behind the last observation (raw-camera recording).
        self.last_frame: CameraFrame | None = None

    def reset(self, seed: int | None = None, task: GraspTask | None = None) -> tuple[dict, dict]:
        """Start an episode (``seed`` None: the next in sequence from ``config.seed``)."""
        state = self.runtime.reset(seed, task)
        self._done = False
        return self._observe(), {"task": state, "episode_seed": self.runtime.episode_seed}

    def step(self, action, stamp_s: float | None = None) -> tuple[dict, float, bool, bool, dict]:
        """Execute one action chunk for one control period.

        ``action``: ``(horizon, 7)`` positions for ``JOINT_NAMES`` at ``stamp_s + k * chunk_dt_s``;
        ``stamp_s`` is the observation the chunk was conditioned on (default: the last one).
        A chunk the tracker rejects (stale, NaN, ...) leaves it holding or on its
        previous plan; ``info["chunk"]`` says why.
        """
        if self._done:
            raise RuntimeError("episode is over: call reset()")
        positions = np.asarray(action, dtype=np.float64)
        if positions.shape != self.action_shape:
            raise ValueError(f"action has shape {positions.shape}, expected {self.action_shape}")
        stamp = self._last_stamp_s if stamp_s is None else float(stamp_s)
        chunk = ActionChunk(stamp, JOINT_NAMES, self._times_from_start_s, positions.tolist())
        decision = self.runtime.submit_chunk(chunk)
        state = self.runtime.advance(self.config.control_period_s, self.after_physics_step)
        self._done = state.done
        info = {"task": state, "chunk": decision, "episode_seed": self.runtime.episode_seed}
        return self._observe(), float(state.success), state.terminated, state.timed_out, info

    def _observe(self) -> dict:
        rt = self.runtime
        self._last_stamp_s = rt.time_s
        obs = {"joint_positions": rt.scene.joint_positions(),
               "instruction": rt.task_state.instruction, "stamp_s": rt.time_s}
        if self.pipeline is not None:
            frame = self.last_frame = rt.render_frame()
            out = self.pipeline.process(frame.color, frame.depth)
            obs.update(image=out.image_rgb, points=out.points, point_colors=out.colors)
        return obs

    def close(self) -> None:
        self.runtime.close()

    def __enter__(self) -> GraspEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
