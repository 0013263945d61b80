"""DART-style pushes: the pulse schedule, and a push displacing the tracked arm."""

import dataclasses

import numpy as np
import pytest

from diffusion_policy_ros.control import ActionChunk
from diffusion_policy_ros.sim.pushes import ArmPushes, PushConfig
from diffusion_policy_ros.sim.runtime import SimulationRuntime, load_tracker_config
from diffusion_policy_ros.sim.scene import JOINT_NAMES
from diffusion_policy_ros.sim.sim_config import SimConfig

KP = np.array([600.0, 600.0, 400.0, 100.0, 100.0, 50.0])


def _trace(pushes: ArmPushes, active, t_end_s=6.0, dt_s=0.002):
    times = np.arange(0.0, t_end_s, dt_s)
    flags = [active(t) for t in times]
    return times, np.array([pushes.torque_nm(t, a) for t, a in zip(times, flags, strict=True)])


def test_pulses_are_smooth_bounded_and_at_most_max_pushes():
    config = PushConfig(duration_s=(0.4, 0.4), gap_s=(0.5, 0.5), max_pushes=3)
    pushes = ArmPushes(config, KP, seed=1)
    times, torque = _trace(pushes, lambda t: True)
    on = np.abs(torque).sum(axis=1) > 0
    starts = np.flatnonzero(np.diff(on.astype(int)) == 1) + 1
    assert pushes.count == 3 and len(starts) == 3
    assert times[starts[0]] == pytest.approx(0.5, abs=0.003)  # after the first gap
    # Raised cosine: consecutive torques differ little (no step at a pulse's edges).
    assert np.abs(np.diff(torque, axis=0)).max() < 0.05 * np.abs(torque).max()
    assert np.all(np.abs(torque) <= pushes.max_peak_nm + 1e-9)


def test_pushes_only_while_active_and_cut_when_it_ends():
    config = PushConfig(duration_s=(1.0, 1.0), gap_s=(0.2, 0.2), max_pushes=10)
    pushes = ArmPushes(config, KP, seed=2)
    times, torque = _trace(pushes, lambda t: 1.0 <= t < 1.5)
    on = np.abs(torque).sum(axis=1) > 0
    assert on.any() and not on[(times < 1.0) | (times >= 1.5)].any()


def test_schedule_is_seeded_and_a_zero_displacement_joint_is_never_pushed():
    config = PushConfig(displacement_rad=(0.05, 0.05, 0.05, 0.05, 0.05, 0.0))
    a = _trace(ArmPushes(config, KP, seed=7), lambda t: True)[1]
    b = _trace(ArmPushes(config, KP, seed=7), lambda t: True)[1]
    np.testing.assert_array_equal(a, b)
    assert np.abs(a[:, :5]).max() > 0 and not a[:, 5].any()


@pytest.mark.parametrize("bad", [dict(displacement_rad=(0.1,) * 5), dict(gap_s=(1.0, 0.5)),
                                 dict(duration_s=(0.0, 0.0)), dict(max_pushes=-1)])
def test_config_is_checked(bad):
    with pytest.raises(ValueError):
        PushConfig(**bad)


def test_a_push_displaces_the_tracked_arm_by_about_torque_over_kp():
    """The tracker holds the start pose; a constant 0.05 rad x kp push on joint 2 moves
    it by about that much, and it comes back when the push ends."""
    rt = SimulationRuntime(dataclasses.replace(SimConfig(), render_observations=False),
                           load_tracker_config(), with_camera=False)
    try:
        rt.reset(seed=0)
        rt.advance(0.01)
        hold = rt.scene.joint_positions()
        chunk = ActionChunk(rt.time_s, JOINT_NAMES, [0.0, 10.0], [hold.tolist()] * 2)
        assert rt.submit_chunk(chunk).accepted
        push = np.zeros(6)
        push[1] = 0.05 * rt.tracker_config.kp[1]
        rt.scene.push_arm(push)
        rt.advance(1.5)
        assert 0.02 < abs(rt.scene.joint_positions()[1] - hold[1]) < 0.08
        rt.scene.push_arm(np.zeros(6))
        rt.advance(1.5)
        assert abs(rt.scene.joint_positions()[1] - hold[1]) < 0.01
        with pytest.raises(ValueError):
            rt.scene.push_arm([np.nan] * 6)
    finally:
        rt.close()
