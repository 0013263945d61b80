"""GraspEnv and SimulationRuntime: shapes, determinism, tracker in the loop, frame schedule."""

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from diffusion_policy_ros.config import CONFIG_DIR
from diffusion_policy_ros.sim.camera import DEFAULT_RESOLUTION
from diffusion_policy_ros.sim.env import GraspEnv
from diffusion_policy_ros.sim.runtime import SimulationRuntime, load_tracker_config
from diffusion_policy_ros.sim.scene import HOME_ARM_Q_RAD
from diffusion_policy_ros.sim.sim_config import SimConfig, load_sim_config
from diffusion_policy_ros.sim.task import GraspTask, parse_instruction


@pytest.fixture(scope="module")
def env():
    with GraspEnv() as e:
        yield e


def _hold(obs, horizon=16):
    """A chunk that keeps the arm where it is, gripper open."""
    return np.tile(obs["joint_positions"], (horizon, 1))


def _reach(obs, offset_rad, horizon=16):
    """A chunk moving every joint by ``offset_rad`` over 1.5 s."""
    chunk = _hold(obs, horizon)
    chunk[:, :6] += np.linspace(0.0, 1.0, horizon)[:, None] * offset_rad
    return chunk


def test_reset_and_step_shapes(env):
    obs, info = env.reset(seed=3)
    assert obs["image"].shape == (128, 128, 3) and obs["image"].dtype == np.uint8
    assert obs["points"].shape == (1024, 3) and obs["points"].dtype == np.float32
    assert obs["point_colors"].shape == (1024, 3) and obs["point_colors"].dtype == np.uint8
    assert obs["joint_positions"].shape == (7,)
    np.testing.assert_allclose(obs["joint_positions"][:6], HOME_ARM_Q_RAD, atol=1e-3)
    assert obs["stamp_s"] == 0.0
    state = info["task"]
    assert parse_instruction(obs["instruction"], env.runtime.scene.object_names) == state.target
    assert info["episode_seed"] == 3
    assert env.action_shape == (16, 7)
    obs, reward, terminated, truncated, info = env.step(_hold(obs))
    assert obs["stamp_s"] == pytest.approx(0.1)
    assert obs["points"].shape == (1024, 3)
    assert reward == 0.0 and terminated is False and truncated is False
    assert info["chunk"].accepted and info["task"].elapsed_s == pytest.approx(0.1)
    assert env.runtime.tracker.ticks == 1 + env.steps_per_period == 51


def test_points_are_registered_in_base_link(env):
    obs, _ = env.reset(seed=4)
    points, colors = obs["points"], obs["point_colors"].astype(int)
    red = (colors[:, 0] > 150) & (colors[:, 1] < 80) & (colors[:, 2] < 80)
    assert red.sum() >= 5
    cube = env.runtime.scene.object_position("red_cube")
    assert np.abs(points[red, :2] - cube[:2]).max() < 0.035  # within the cube's footprint
    assert np.all(points[red, 2] < 0.05)


def test_same_seed_same_episode():
    """Layout, task, depth noise, physics and tracker are all seeded: identical runs."""
    runs = []
    for _ in range(2):
        with GraspEnv() as env:
            obs, _ = env.reset(seed=11)
            trace = [obs]
            for k in range(3):
                obs, *_ = env.step(_reach(obs, 0.05 * (k + 1)))
                trace.append(obs)
            runs.append(trace)
    for a, b in zip(*runs, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert not np.array_equal(runs[0][0]["points"], runs[0][-1]["points"])  # the arm moved


def test_seed_sequence_and_distinct_episodes():
    config = dataclasses.replace(SimConfig(), seed=40, render_observations=False)
    with GraspEnv(config) as env:
        seeds, layouts = [], []
        for _ in range(3):
            _, info = env.reset()
            seeds.append(info["episode_seed"])
            layouts.append(env.runtime.scene.object_positions()["red_cube"])
        assert seeds == [40, 41, 42]
        assert not np.allclose(layouts[0], layouts[1])
        _, info = env.reset(seed=7)
        assert info["episode_seed"] == 7
        assert env.reset()[1]["episode_seed"] == 8


def test_chunks_drive_the_arm_through_the_tracker():
    with GraspEnv(dataclasses.replace(SimConfig(), render_observations=False)) as env:
        obs, _ = env.reset(seed=2)
        goal = obs["joint_positions"] + [0.3, -0.2, 0.2, 0.1, -0.1, 0.3, -0.045]
        ramp = np.clip(np.arange(16) / 5.0, 0.0, 1.0)[:, None]  # reach the goal in 0.5 s
        for _ in range(25):
            q = obs["joint_positions"]
            obs, *_ = env.step(q + ramp * (goal - q))
        np.testing.assert_allclose(obs["joint_positions"][:6], goal[:6], atol=5e-3)
        assert obs["joint_positions"][6] == pytest.approx(0.04, abs=2e-3)
        diag = env.runtime.tracker.diagnostics()
        assert diag["chunks_accepted"] == 25 and diag["mode"] == "tracking"


def test_rejected_chunks_are_reported_not_raised():
    with GraspEnv(dataclasses.replace(SimConfig(), render_observations=False)) as env:
        obs, _ = env.reset(seed=1)
        for _ in range(8):
            obs, *_ = env.step(_hold(obs))
        _, _, _, _, info = env.step(_hold(obs), stamp_s=obs["stamp_s"] - 1.0)
        assert not info["chunk"].accepted and info["chunk"].reason.value == "stamp_too_old"
        with pytest.raises(ValueError):
            env.step(np.zeros((8, 7)))


def test_time_limit_truncates_and_the_episode_must_be_reset():
    config = dataclasses.replace(SimConfig(), time_limit_s=0.3, render_observations=False)
    with GraspEnv(config) as env:
        obs, _ = env.reset(seed=0, task=GraspTask("green_cube", "lift the green box"))
        assert obs["instruction"] == "lift the green box"
        flags = []
        for _ in range(3):
            obs, reward, terminated, truncated, info = env.step(_hold(obs))
            flags.append((terminated, truncated))
        assert flags == [(False, False), (False, False), (False, True)]
        assert info["task"].timed_out and reward == 0.0
        with pytest.raises(RuntimeError):
            env.step(_hold(obs))
        env.reset(seed=0)
        env.step(_hold(obs))


def test_control_period_must_be_whole_physics_steps():
    with pytest.raises(ValueError):
        GraspEnv(dataclasses.replace(SimConfig(), control_period_s=0.005,
                                     render_observations=False))


def test_runtime_frames_at_30_hz_and_external_efforts():
    """What sim_node does: apply received efforts each 2 ms, publish frames when due."""
    runtime = SimulationRuntime(SimConfig(depth_noise=False))
    try:
        runtime.reset(seed=5)
        frames = []
        q0 = runtime.scene.joint_positions()
        for _ in range(500):  # 1 s
            if runtime.frame_due():
                frames.append(runtime.render_frame())
            runtime.step(np.zeros(6), 0.085)  # gravity compensation holds the arm
        assert len(frames) == 30
        np.testing.assert_allclose(np.diff([f.stamp_s for f in frames]), 1 / 30, atol=0.0021)
        first = frames[0]
        assert (first.color.encoding, first.depth.encoding) == ("bgra8", "16UC1")
        assert (first.color.width, first.color.height) == DEFAULT_RESOLUTION
        assert first.camera.width == DEFAULT_RESOLUTION[0]
        np.testing.assert_allclose(runtime.scene.joint_positions(), q0, atol=1e-3)
        assert runtime.task_state.elapsed_s == pytest.approx(1.0)
        # no noise: the same state renders the same depth
        assert runtime.render_frame().depth.data == runtime.render_frame().depth.data
    finally:
        runtime.close()


def test_packaged_configs_load():
    assert load_sim_config() == SimConfig()
    assert load_sim_config(CONFIG_DIR / "sim.yaml").time_limit_s == 20.0
    assert load_tracker_config().rate_hz == 500.0


def test_sim_modules_do_not_import_rclpy():
    code = ("import sys, diffusion_policy_ros.sim.env, diffusion_policy_ros.sim.expert_eval; "
            "assert 'rclpy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_person_s_words_are_resolved_in_the_layout_and_after_what_was_said():
    runtime = SimulationRuntime(SimConfig(depth_noise=False))
    state = runtime.reset(seed=5, instruction="pick up the cube on the left")
    cubes = [r for r in runtime.referents() if r.shape == "cube"]
    right_axis = runtime.dialogue.config.viewpoint.right_axis()
    across = {r.name: float(np.dot(r.position_m[:2], right_axis)) for r in cubes}
    leftmost, second = sorted(across, key=across.get)[:2]
    assert across[second] - across[leftmost] > 0.03, across  # a layout a person can tell
    assert state.target == leftmost and state.instruction == "pick up the cube on the left"
    # A correction resolves against it; words that fit several objects suspend scoring.
    colour = next(r.colour for r in cubes if r.name == second)
    assert runtime.follow_instruction(f"no, the {colour} one").target == second
    assert runtime.follow_instruction("the cube").target == ""
    # The episode's own task is remembered too: "the other one" after its words.
    state = runtime.reset(seed=6)
    kind = state.target.partition("_")[2]
    others = [r.name for r in runtime.referents() if r.shape == kind and r.name != state.target]
    expected = others[0] if len(others) == 1 else ""
    assert runtime.follow_instruction("the other one").target == expected
