"""GraspRetry: a gripper closed on nothing, or stalled part-closed with the tool low, is
re-opened for a while, a few times."""

import numpy as np
import pytest

from diffusion_policy_ros.policy.grasp_retry import GraspRetry, GraspRetryConfig

DT_S = 0.1  # one chunk per observation, 10 Hz


def _chunk(gripper_m: float = 0.0) -> np.ndarray:
    chunk = np.tile(np.linspace(0.1, 0.6, 7), (16, 1))
    chunk[:, -1] = gripper_m
    return chunk


ARM_RAD = [0.0, -0.5, 1.0, -0.5, 0.0, 0.0]


def _tool_at(z_m: float):
    """A stand-in for forward kinematics: the tool at height ``z_m`` whatever the joints."""
    return lambda arm_rad: np.array([0.5, 0.0, z_m]) + 0.0 * np.sum(arm_rad)


def _run(retry: GraspRetry, openings_m, start_s: float = 3.0, arm_kept: bool = True
         ) -> list[bool]:
    """Whether each chunk was held open, for measured openings one chunk apart."""
    held = []
    for k, opening in enumerate(openings_m):
        chunk = _chunk()
        out = retry.apply(chunk, [*ARM_RAD, opening], start_s + k * DT_S)
        if arm_kept:  # a gripper closed on nothing never changes the arm
            np.testing.assert_array_equal(out[:, :-1], chunk[:, :-1])
        held.append(bool(out[0, -1] == retry.config.open_to_m))
        if not held[-1]:
            assert out is chunk  # unchanged chunks are not copied
    return held


def test_a_gripper_closed_on_nothing_is_reopened_for_open_for_s():
    retry = GraspRetry(GraspRetryConfig(empty_for_s=0.5, open_for_s=1.0, max_retries=3))
    held = _run(retry, [0.08] * 3 + [0.001] * 30)
    # closed from chunk 3 on: 0.5 s later (chunk 8) held open for 1.0 s (10 chunks),
    # then, still closed, again 0.5 s after that
    assert held[:8] == [False] * 8 and held[8:18] == [True] * 10
    assert held[18:23] == [False] * 5 and held[23] is True
    assert retry.retries == retry.retries_total == 2


def test_a_held_object_is_never_released():
    retry = GraspRetry(GraspRetryConfig())
    # closing onto a 40 mm cube: the opening stops at the object's width
    assert not any(_run(retry, list(np.linspace(0.085, 0.04, 10)) + [0.04] * 100))
    assert retry.retries_total == 0


def test_the_gripper_must_stay_empty_for_empty_for_s():
    retry = GraspRetry(GraspRetryConfig(empty_for_s=0.5))
    # closed for 0.4 s, open again, closed for 0.4 s: never long enough
    assert not any(_run(retry, ([0.0] * 5 + [0.05]) * 5))


def test_retries_stop_at_max_retries_and_restart_with_the_task():
    config = GraspRetryConfig(empty_for_s=0.0, open_for_s=DT_S, max_retries=2)
    retry = GraspRetry(config)
    assert sum(_run(retry, [0.0] * 20)) == 2 and retry.retries == 2
    retry.restart()  # a new instruction
    assert sum(_run(retry, [0.0] * 20, start_s=10.0)) == 2
    assert retry.retries_total == 4


def test_disabled_and_non_finite_openings_change_nothing():
    assert not any(_run(GraspRetry(GraspRetryConfig(enabled=False)), [0.0] * 30))
    assert not any(_run(GraspRetry(GraspRetryConfig()), [float("nan")] * 30))


def test_a_grasp_stalled_on_an_edge_with_the_tool_low_is_reopened():
    config = GraspRetryConfig(stalled_for_s=1.0, open_for_s=0.5, max_stall_retries=1)
    retry = GraspRetry(config, _tool_at(0.04))
    # closing onto a cube's corners: the opening stops at 62 mm and creeps by 0.5 mm
    openings = list(np.linspace(0.085, 0.062, 5)) + list(np.linspace(0.062, 0.0615, 40))
    held = _run(retry, openings, arm_kept=False)
    # still from chunk 4 on: 1.0 s later (chunk 14) held open for 0.5 s, once
    assert held[:14] == [False] * 14 and held[14:19] == [True] * 5 and not any(held[19:])
    assert retry.stall_retries == retry.retries_total == retry.stall_retries_total == 1
    assert retry.retries == 0


def test_a_stalled_grasp_is_reopened_then_the_tool_raised_from_where_it_stalled():
    """The arm columns hold the stalled pose, then rise at stall_lift_speed_m_s to
    stall_lift_m above it (a linear stand-in for the forward kinematics)."""
    gains = np.array([0.0, 0.2, -0.1, 0.05, 0.0, 0.0])  # dz / dq of each joint (m/rad)

    def tool(arm_rad):
        return np.array([0.5, 0.0, 0.04 + float(gains @ arm_rad)])

    config = GraspRetryConfig(stalled_for_s=0.0, open_for_s=1.0, stall_lift_m=0.05,
                              stall_lift_speed_m_s=0.1)
    retry = GraspRetry(config, tool, chunk_dt_s=DT_S)
    measured = [*ARM_RAD, 0.06]
    stalled_at_s = 3.0
    out = retry.apply(_chunk(), measured, stalled_at_s)
    rises = [tool(row[:-1])[2] - tool(np.array(ARM_RAD))[2] for row in out]
    # RELEASE_S (0.3 s) at the stalled pose, then 0.01 m per row up to 0.05 m
    np.testing.assert_allclose(rises[:4], 0.0, atol=1e-9)
    np.testing.assert_allclose(rises[4:9], [0.01, 0.02, 0.03, 0.04, 0.05], atol=1e-6)
    np.testing.assert_allclose(rises[9:], 0.05, atol=1e-6)
    assert (out[:, -1] == config.open_to_m).all()
    # a later chunk of the same re-opening continues the same path (from the stalled pose)
    later = retry.apply(_chunk(), [*ARM_RAD, 0.07], stalled_at_s + 0.5)
    np.testing.assert_allclose(later[0], out[5], atol=1e-12)
    # after open_for_s the policy's chunk is back, arm and gripper
    back = retry.apply(_chunk(), [*ARM_RAD, 0.085], stalled_at_s + 1.0)
    np.testing.assert_array_equal(back, _chunk())


def test_a_lifted_or_closing_grasp_is_never_reopened():
    stalled = [0.085] * 3 + [0.06] * 60
    # the tool above stalled_tool_below_m: what the fingers hold may be off the table
    assert not any(_run(GraspRetry(GraspRetryConfig(), _tool_at(0.2)), stalled))
    # without forward kinematics the trigger is off
    assert not any(_run(GraspRetry(GraspRetryConfig()), stalled))
    assert not any(_run(GraspRetry(GraspRetryConfig(max_stall_retries=0), _tool_at(0.04)),
                        stalled))
    # still closing (2 mm per chunk), or a flat grasp below stalled_below_m's band start
    closing = list(np.arange(0.074, 0.0, -0.002))
    retry = GraspRetry(GraspRetryConfig(max_retries=0), _tool_at(0.04))
    assert not any(_run(retry, closing))
    # a NaN tool height counts as high
    assert not any(_run(GraspRetry(GraspRetryConfig(), _tool_at(float("nan"))), stalled))


def test_the_two_triggers_have_their_own_budgets():
    config = GraspRetryConfig(empty_for_s=0.0, stalled_for_s=0.0, open_for_s=DT_S,
                              max_retries=1, max_stall_retries=2)
    retry = GraspRetry(config, _tool_at(0.04))
    assert sum(_run(retry, [0.0] * 10 + [0.05] * 10, arm_kept=False)) == 3
    assert (retry.retries, retry.stall_retries, retry.retries_total) == (1, 2, 3)


@pytest.mark.parametrize("change", [{"empty_below_m": 0.0}, {"empty_below_m": 0.1},
                                    {"open_for_s": 0.0}, {"max_retries": -1},
                                    {"stalled_below_m": 0.01}, {"stalled_below_m": 0.02},
                                    {"stalled_for_s": -1.0}, {"max_stall_retries": -1},
                                    {"stall_tolerance_m": -0.001}, {"stall_lift_m": -0.01},
                                    {"stall_lift_speed_m_s": 0.0}])
def test_inconsistent_settings_are_refused(change):
    with pytest.raises(ValueError):
        GraspRetry(GraspRetryConfig(**change))
