"""EmptyGraspRetry: a gripper closed on nothing is re-opened for a while, a few times."""

import numpy as np
import pytest

from diffusion_policy_ros.acting.grasp_retry import EmptyGraspRetry, GraspRetryConfig

from .conftest import retry_config

DT_S = 0.1  # one chunk per observation, 10 Hz


def _chunk(gripper_m: float = 0.0) -> np.ndarray:
    chunk = np.tile(np.linspace(0.1, 0.6, 7), (16, 1))
    chunk[:, -1] = gripper_m
    return chunk


def _run(retry: EmptyGraspRetry, openings_m, start_s: float = 3.0) -> list[bool]:
    """Whether each chunk was held open, for measured openings one chunk apart."""
    held = []
    for k, opening in enumerate(openings_m):
        chunk = _chunk()
        out = retry.apply(chunk, np.append(np.zeros(6), opening), start_s + k * DT_S)
        np.testing.assert_array_equal(out[:, :-1], chunk[:, :-1])  # the arm is never changed
        held.append(bool(out[0, -1] == retry.config.open_to_m))
        if not held[-1]:
            assert out is chunk  # unchanged chunks are not copied
    return held


def test_a_gripper_closed_on_nothing_is_reopened_for_open_for_s():
    retry = EmptyGraspRetry(retry_config(empty_for_s=0.5, open_for_s=1.0, max_retries=3))
    held = _run(retry, [0.08] * 3 + [0.001] * 30)
    # closed from chunk 3 on: 0.5 s later (chunk 8) held open for 1.0 s (10 chunks),
    # then, still closed, again 0.5 s after that
    assert held[:8] == [False] * 8 and held[8:18] == [True] * 10
    assert held[18:23] == [False] * 5 and held[23] is True
    assert retry.retries == retry.retries_total == 2


def test_each_reopening_is_one_event_for_the_log():
    retry = EmptyGraspRetry(retry_config(empty_for_s=0.5, open_for_s=1.0, max_retries=2))
    events = []
    for k, opening in enumerate([0.08] * 3 + [0.001] * 40):
        retry.apply(_chunk(), np.append(np.zeros(6), opening), 3.0 + k * DT_S)
        if retry.last_event is not None:
            events.append((k, retry.last_event))
    assert [(k, e.kind) for k, e in events] == [(8, "reopened"), (23, "reopened")]
    assert events[0][1].stamp_s == pytest.approx(3.8)
    assert "closed on nothing (1 mm for 0.5 s): held open at 85 mm for 1 s" in events[0][1].message
    assert "(re-opening 2 of 2 for this task)" in events[1][1].message


def test_a_held_object_is_never_released():
    retry = EmptyGraspRetry(retry_config())
    # closing onto a 40 mm cube: the opening stops at the object's width
    assert not any(_run(retry, list(np.linspace(0.085, 0.04, 10)) + [0.04] * 100))
    assert retry.retries_total == 0


def test_the_gripper_must_stay_empty_for_empty_for_s():
    retry = EmptyGraspRetry(retry_config(empty_for_s=0.5))
    # closed for 0.4 s, open again, closed for 0.4 s: never long enough
    assert not any(_run(retry, ([0.0] * 5 + [0.05]) * 5))


def test_retries_stop_at_max_retries_and_restart_with_the_task():
    config = retry_config(empty_for_s=0.0, open_for_s=DT_S, max_retries=2)
    retry = EmptyGraspRetry(config)
    assert sum(_run(retry, [0.0] * 20)) == 2 and retry.retries == 2
    retry.restart()  # a new instruction
    assert sum(_run(retry, [0.0] * 20, start_s=10.0)) == 2
    assert retry.retries_total == 4


def test_non_finite_openings_change_nothing():
    assert not any(_run(EmptyGraspRetry(retry_config()), [float("nan")] * 30))


@pytest.mark.parametrize("change", [{"empty_below_m": 0.0}, {"empty_below_m": 0.1},
                                    {"open_for_s": 0.0}, {"max_retries": -1}])
def test_inconsistent_settings_are_refused(change):
    with pytest.raises(ValueError):
        EmptyGraspRetry(retry_config(**change))


def test_the_threshold_that_depends_on_the_objects_has_no_default():
    assert GraspRetryConfig().enabled is False
    GraspRetryConfig().validate()  # off, nothing to set
    with pytest.raises(ValueError, match="empty_below_m is not set.*grasp_rules.yaml"):
        GraspRetryConfig(enabled=True).validate()
