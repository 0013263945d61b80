"""The grasp task for reinforcement learning: ``GraspRlEnv`` (gymnasium) and its reward.

``GraspRlEnv`` is ``GraspEnv`` (same physics, camera, RGB-D pipeline and
``PdTracker`` as the ROS nodes) behind ``gymnasium.Env``, with the first seed
document's reward, each term reported separately in ``info["reward_terms"]``::

    reward = w_success * success + w_distance * distance_improvement + w_smooth * smoothness

``success`` is 1 on the step the named object has been held lifted long enough;
``distance_improvement`` the decrease (m) of the tool-centre-point to target-object
distance over the step; ``smoothness`` = -||a_t - a_{t-1}|| over the executed
actions, i.e. the tracker's last reference of the step (6 joint angles in rad and
the gripper opening in m: what the arm was actually commanded to, after limits).

The scored object is always the one the current instruction names (the simulation
follows a person's instruction, as ``sim_node`` does). ``switch_probability``
starts that share of episodes with another object's instruction and replaces it
with the episode's own after ``SWITCH_AFTER_S`` (the ``dpr eval --instructions
switch`` protocol), so the policy learns to drop an old target. ``depth_noise`` turns
on the simulated Kinect's time-of-flight noise. The environment is the world, as
``sim_node`` is: actions are executed as given. The acting loop around the policy (its
observation history, task restarts and chunk rules) is the caller's, through
``acting.PolicyAgent`` as in ``policy_node`` (``learning.finetune``'s rollouts).

Episodes are seeded explicitly (``reset(seed=...)``) or from ``seed_start`` in steps
of ``seed_stride`` (vectorised envs interleave). A step after the episode ended is
answered with the last observation, zero reward and ``info["idle"]``, so a vector
env without auto-reset can keep stepping an env that has finished its share.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np

from diffusion_policy_ros.config import param
from diffusion_policy_ros.sim.env import GraspEnv
from diffusion_policy_ros.sim.scene import JOINT_NAMES
from diffusion_policy_ros.sim.sim_config import SimConfig, load_sim_config
from diffusion_policy_ros.sim.task import SWITCH_AFTER_S, other_task

INSTRUCTION_MAX_CHARS = 128
_CHARSET = " ?!,.'-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


@dataclasses.dataclass
class RewardConfig:
    """Weights of the reward terms (the first seed document's values)."""

    success_weight: float = param(5.0, "Weight of the success term (1 on the step the named "
                                  "object counts as lifted and held)", low=0.0, high=1e4)
    distance_weight: float = param(0.8, "Weight of the tool-to-target distance improvement "
                                   "(m) over a control step", low=0.0, high=1e4)
    smoothness_weight: float = param(0.2, "Weight of the smoothness term, -||a_t - a_{t-1}|| "
                                     "over the executed joint references (rad, gripper m)",
                                     low=0.0, high=1e4)


def reward_terms(success: bool, distance_before_m: float, distance_after_m: float,
                 action, previous_action) -> dict[str, float]:
    """The three unweighted terms of one control step (``previous_action`` None: the
    first step of an episode, smoothness 0)."""
    smooth = 0.0
    if previous_action is not None:
        smooth = -float(np.linalg.norm(np.asarray(action, float)
                                       - np.asarray(previous_action, float)))
    return {"success": float(success),
            "distance_improvement": float(distance_before_m - distance_after_m),
            "smoothness": smooth}


def weighted_reward(terms: dict[str, float], config: RewardConfig) -> float:
    return (config.success_weight * terms["success"]
            + config.distance_weight * terms["distance_improvement"]
            + config.smoothness_weight * terms["smoothness"])


class NonFiniteStepError(RuntimeError):
    """An observation or reward that is not finite; names the episode seed."""


class GraspRlEnv(gym.Env):
    """``GraspEnv`` with the reward above, as a ``gymnasium.Env``.

    Observation: ``image`` (H, W, 3) uint8 RGB, ``points`` (N, 3) float32 base_link m,
    ``point_colors`` (N, 3) uint8, ``joint_positions`` (7,) float64, ``instruction``
    (text), ``elapsed_s`` (1,) episode time. Action: (horizon, 7) joint targets (rad,
    gripper m) for the observation's stamp + k * chunk_dt_s, as ``policy_node`` sends.
    """

    metadata = {"render_modes": []}

    def __init__(self, sim_config: SimConfig | None = None, reward: RewardConfig | None = None,
                 *, depth_noise: bool = False, switch_probability: float = 0.0,
                 seed_start: int = 0, seed_stride: int = 1, image_size: tuple = (128, 128),
                 num_points: int = 1024):
        config = dataclasses.replace(sim_config or load_sim_config(), depth_noise=depth_noise,
                                     render_observations=True)
        self.env = GraspEnv(config)
        self.reward_config = reward or RewardConfig()
        self.switch_probability = float(switch_probability)
        self._next_seed = int(seed_start)
        self._seed_stride = int(seed_stride)
        h, w = image_size
        self.observation_space = gym.spaces.Dict({
            "image": gym.spaces.Box(0, 255, (h, w, 3), np.uint8),
            "points": gym.spaces.Box(-np.inf, np.inf, (num_points, 3), np.float32),
            "point_colors": gym.spaces.Box(0, 255, (num_points, 3), np.uint8),
            "joint_positions": gym.spaces.Box(-np.inf, np.inf, (len(JOINT_NAMES),), np.float64),
            "instruction": gym.spaces.Text(INSTRUCTION_MAX_CHARS, charset=_CHARSET),
            "elapsed_s": gym.spaces.Box(0.0, np.inf, (1,), np.float64),
        })
        self.action_space = gym.spaces.Box(-np.inf, np.inf, self.env.action_shape, np.float64)
        self._obs: dict | None = None
        self._seed: int | None = None
        self._start_s = 0.0
        self._switch_to: str | None = None
        self._distance_m = 0.0
        self._action: np.ndarray | None = None
        self._done = True

    # -- gymnasium ------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is None:
            seed = self._next_seed
            self._next_seed += self._seed_stride
        self._seed = int(seed)
        runtime = self.env.runtime
        rng = np.random.default_rng([self._seed, 17])
        self._switch_to = None
        obs, info = self.env.reset(self._seed)
        if self.switch_probability > 0.0 and rng.random() < self.switch_probability:
            own = info["task"]  # the episode's own, in the layout just drawn
            first = other_task(own.target, runtime.scene.on_table_names, rng)
            self._switch_to = own.instruction
            obs, info = self.env.reset(self._seed, task=first)
        self._start_s = runtime.time_s
        self._distance_m = self._target_distance_m()
        self._action = None
        self._done = False
        self._obs = self._observation(obs)
        return self._obs, self._info(info["task"], None)

    def step(self, action):
        if self._done:
            return self._obs, 0.0, True, False, {"idle": True, "episode_seed": self._seed}
        runtime = self.env.runtime
        obs, _, terminated, truncated, info = self.env.step(np.asarray(action, np.float64))
        state = info["task"]
        command = runtime.last_command
        executed = np.array([*command.q_ref, command.gripper_opening_m
                             if command.gripper_opening_m is not None
                             else runtime.scene.joint_positions()[6]])
        if (self._switch_to is not None and not state.done
                and runtime.time_s - self._start_s >= SWITCH_AFTER_S):
            state = runtime.follow_instruction(self._switch_to)
            obs["instruction"] = state.instruction
            self._switch_to = None
        distance = self._target_distance_m()
        terms = reward_terms(state.success, self._distance_m, distance, executed, self._action)
        reward = weighted_reward(terms, self.reward_config)
        self._distance_m, self._action = distance, executed
        self._done = terminated or truncated
        self._obs = self._observation(obs)
        if not np.isfinite(reward):
            raise NonFiniteStepError(f"episode seed {self._seed}: non-finite reward {terms}")
        out = self._info(state, decision=info["chunk"])
        out["reward_terms"] = terms
        return self._obs, reward, terminated, truncated, out

    def close(self) -> None:
        self.env.close()

    # -- helpers --------------------------------------------------------------------------

    def _target_distance_m(self) -> float:
        """Tool centre point to the named object's centre (0 while none is named)."""
        target = self.env.runtime.task_state.target
        if not target:
            return 0.0
        scene = self.env.runtime.scene
        return float(np.linalg.norm(scene.tcp_pose()[0] - scene.object_position(target)))

    def _observation(self, obs: dict) -> dict:
        for key in ("image", "points", "joint_positions"):
            if not np.isfinite(obs[key]).all():
                raise NonFiniteStepError(f"episode seed {self._seed}: non-finite '{key}' in "
                                         "the observation")
        return {"image": obs["image"], "points": obs["points"].astype(np.float32),
                "point_colors": obs["point_colors"],
                "joint_positions": np.asarray(obs["joint_positions"], np.float64),
                "instruction": obs["instruction"][:INSTRUCTION_MAX_CHARS],
                "elapsed_s": np.array([self.env.runtime.time_s - self._start_s])}

    def _info(self, state, decision) -> dict:
        return {"episode_seed": self._seed, "target": state.target, "success": state.success,
                "wrong_object": state.wrong_object or "", "timed_out": state.timed_out,
                "chunk_accepted": decision is None or decision.accepted, "idle": False}
