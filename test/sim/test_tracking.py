"""The PD tracker on the simulated arm with late, jittered chunks (issue: tracker in sim)."""

import dataclasses

import numpy as np
import pytest

from diffusion_policy_ros.sim.expert import ExpertConfig, ScriptedExpert
from diffusion_policy_ros.sim.runtime import SimulationRuntime, load_tracker_config
from diffusion_policy_ros.sim.sim_config import SimConfig
from diffusion_policy_ros.sim.tracking_eval import run_episode


@pytest.fixture(scope="module")
def runtime():
    rt = SimulationRuntime(dataclasses.replace(SimConfig(), render_observations=False),
                           load_tracker_config(), with_camera=False)
    yield rt
    rt.close()


def test_expert_grasps_through_late_jittered_chunks(runtime):
    expert = ScriptedExpert(runtime.scene.model, ExpertConfig())
    for seed in (0, 1, 2):
        result, _ = run_episode(runtime, expert, seed, 0.05, 0.15)
        assert result.success, (seed, result)
        assert result.rms_error_rad < 0.01 and result.max_error_rad < 0.05


def test_chunks_that_stop_mid_motion_leave_the_arm_resting_within_limits(runtime):
    expert = ScriptedExpert(runtime.scene.model, ExpertConfig())
    cfg = runtime.tracker_config
    _, traces = run_episode(runtime, expert, seed=5, stop_chunks_at_s=0.8, max_time_s=2.5)
    t, q_ref, qd_ref = traces["t"], traces["q_ref"], traces["qd_ref"]
    moving = np.abs(qd_ref[(t > 0.5) & (t < 0.8)]).max()
    assert moving > 0.05, "the arm should be moving when the chunks stop"
    late = t > 2.0
    assert np.abs(qd_ref[late]).max() < 1e-6, "the reference must come to rest and hold"
    assert np.ptp(q_ref[late], axis=0).max() < 1e-6
    assert np.abs(traces["qd_final"]).max() < 0.02, "the arm itself comes to rest"
    lower, upper = np.asarray(cfg.reference_lower()), np.asarray(cfg.reference_upper())
    assert np.all(q_ref >= lower - 1e-9) and np.all(q_ref <= upper + 1e-9)
    assert np.abs(np.diff(qd_ref, axis=0)).max() / runtime.scene.timestep_s <= \
        max(cfg.acceleration_limits) + 1e-6
