"""GraspRlEnv: the seed's reward terms, the gymnasium contract, switches and idle steps."""

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from diffusion_policy_ros.learning.rl_env import (
    GraspRlEnv,
    NonFiniteStepError,
    RewardConfig,
    reward_terms,
    weighted_reward,
)
from diffusion_policy_ros.sim.sim_config import load_sim_config
from diffusion_policy_ros.sim.task import SWITCH_AFTER_S


def test_reward_terms_on_hand_made_transitions():
    a0 = np.zeros(7)
    a1 = np.array([0.3, 0.4, 0, 0, 0, 0, 0.0])
    first = reward_terms(False, 0.30, 0.25, a0, None)
    assert first == pytest.approx({"success": 0.0, "distance_improvement": 0.05,
                                   "smoothness": 0.0})
    moved = reward_terms(False, 0.25, 0.27, a1, a0)
    assert moved == pytest.approx({"success": 0.0, "distance_improvement": -0.02,
                                   "smoothness": -0.5})
    done = reward_terms(True, 0.02, 0.02, a1, a1)
    config = RewardConfig()
    assert (config.success_weight, config.distance_weight, config.smoothness_weight) == (
        5.0, 0.8, 0.2)
    assert weighted_reward(done, config) == pytest.approx(5.0)
    assert weighted_reward(moved, config) == pytest.approx(0.8 * -0.02 + 0.2 * -0.5)
    assert weighted_reward(moved, RewardConfig(1.0, 2.0, 0.0)) == pytest.approx(-0.04)


@pytest.fixture(scope="module")
def env():
    sim = dataclasses.replace(load_sim_config(), time_limit_s=0.5)
    e = GraspRlEnv(sim, seed_start=300, seed_stride=7)
    yield e
    e.close()


def _hold(obs, horizon=16):
    return np.repeat(obs["joint_positions"][None], horizon, axis=0)


def test_env_passes_gymnasiums_checks_and_scores_a_held_arm(env):
    obs, info = env.reset()
    assert info["episode_seed"] == 300
    assert env.observation_space.contains(obs)
    terms, rewards, done, steps = [], [], False, 0
    while not done:
        obs, reward, terminated, truncated, info = env.step(_hold(obs))
        assert env.observation_space.contains(obs)
        terms.append(info["reward_terms"])
        rewards.append(reward)
        done = terminated or truncated
        steps += 1
    assert steps == 5 and truncated and not terminated  # 0.5 s at 0.1 s per step
    # A held arm: no progress, no success, the references barely change.
    assert all(abs(t["distance_improvement"]) < 5e-3 for t in terms)
    assert all(t["success"] == 0.0 for t in terms)
    assert all(t["smoothness"] > -0.02 for t in terms)
    assert rewards == pytest.approx([weighted_reward(t, RewardConfig()) for t in terms])
    # After the end an env answers steps without simulating (a vector env's idle member).
    _, reward, terminated, _, info = env.step(_hold(obs))
    assert info["idle"] and reward == 0.0 and terminated
    assert env.reset()[1]["episode_seed"] == 307  # the next seed of this env's stride
    assert env.reset(seed=42)[1]["episode_seed"] == 42


def test_moving_towards_the_target_is_rewarded(env):
    from diffusion_policy_ros.sim.ik import TcpIk

    obs, info = env.reset(seed=5)
    scene = env.env.runtime.scene
    ik = TcpIk(scene.model)
    start = obs["joint_positions"]
    _, tool_rotation = ik.forward(start[:6])
    goal = scene.object_position(info["target"]) + np.array([0.0, 0.0, 0.12])
    q = ik.solve(start[:6], goal, tool_rotation).q_rad
    chunk = np.repeat(start[None], 16, axis=0)
    for k in range(16):  # 0.8 s to get there (row k is for 0.1 k s after the observation)
        chunk[k, :6] = start[:6] + (q - start[:6]) * min(1.0, k / 8)
    gains = []
    for _ in range(3):
        obs, _, _, _, info = env.step(chunk)
        gains.append(info["reward_terms"]["distance_improvement"])
        assert info["reward_terms"]["smoothness"] < 0.0 or len(gains) == 1
    assert sum(gains) > 0.02, gains


def test_switch_episodes_score_the_second_instruction():
    sim = dataclasses.replace(load_sim_config(), time_limit_s=2.0)
    with GraspRlEnv(sim, switch_probability=1.0) as e:
        obs, info = e.reset(seed=5000)
        first_target, first_words = info["target"], obs["instruction"]
        while e.env.runtime.time_s - e._start_s < SWITCH_AFTER_S + 0.05:
            obs, _, _, _, info = e.step(_hold(obs))
        assert obs["instruction"] != first_words and info["target"] != first_target
        assert info["target"] == e.env.runtime.task_state.target


def test_non_finite_observations_name_the_episode(env, monkeypatch):
    obs, _ = env.reset(seed=9)
    real = env.env.step

    def corrupt(action, stamp_s=None):
        out = real(action, stamp_s)
        out[0]["points"][0, 0] = np.nan
        return out

    monkeypatch.setattr(env.env, "step", corrupt)
    with pytest.raises(NonFiniteStepError, match="episode seed 9"):
        env.step(_hold(obs))


def test_sync_vector_env_batches_two_envs():
    sim = dataclasses.replace(load_sim_config(), time_limit_s=0.3)
    envs = gym.vector.SyncVectorEnv(
        [lambda: GraspRlEnv(sim), lambda: GraspRlEnv(sim)],
        autoreset_mode=gym.vector.AutoresetMode.DISABLED)
    try:
        obs, info = envs.reset(seed=[1, 2])
        assert obs["image"].shape == (2, 128, 128, 3) and len(obs["instruction"]) == 2
        actions = np.stack([_hold({"joint_positions": j}) for j in obs["joint_positions"]])
        obs, reward, terminated, truncated, info = envs.step(actions)
        terms = {k for k in info["reward_terms"] if not k.startswith("_")}  # "_k": gym's masks
        assert reward.shape == (2,) and terms == {"success", "distance_improvement",
                                                  "smoothness"}
        assert info["reward_terms"]["smoothness"].shape == (2,)
    finally:
        envs.close()
