"""ReferenceLimiter, GripperRateLimiter and the PD law."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diffusion_policy_ros.control import GripperRateLimiter, ReferenceLimiter, pd_effort
from diffusion_policy_ros.control.limits import braking_distance, saturate, stopping_speed

H = 0.002


def limiter(n=1, lo=-1.0, hi=1.0, v=2.0, a=10.0, frac=0.5):
    return ReferenceLimiter([lo] * n, [hi] * n, [v] * n, [a] * n, frac)


def run(lim, targets, h=H):
    """Step through ``[(pos, vel)]`` targets; return positions, velocities, accelerations."""
    xs, vs, accs = [], [], []
    for p, v in targets:
        lim.step(h, p, v)
        xs.append(list(lim.position))
        vs.append(list(lim.velocity))
        accs.append(list(lim.acceleration))
    return np.array(xs), np.array(vs), np.array(accs)


def test_smooth_target_within_limits_passes_through_exactly():
    lim = limiter()
    ts = np.arange(1, 1000) * H
    target = [([0.5 * math.sin(2 * t)], [math.cos(2 * t)]) for t in ts]
    lim.reset([0.0], [1.0])
    x, v, _ = run(lim, target)
    np.testing.assert_allclose(x[:, 0], 0.5 * np.sin(2 * ts), atol=1e-12)
    assert not lim.saturated


def test_step_target_moves_with_bounded_velocity_and_acceleration_without_overshoot():
    lim = limiter(v=2.0, a=10.0)
    x, v, acc = run(lim, [([0.8], [0.0])] * 1000)
    assert np.abs(v).max() <= 2.0 + 1e-12
    assert np.abs(acc).max() <= 10.0 + 1e-9
    assert x.max() <= 0.8 + 1e-12  # no overshoot
    assert x[-1, 0] == pytest.approx(0.8, abs=1e-12)
    assert v[-1, 0] == 0.0
    # Minimum time with braking at half the acceleration limit: well under 1 s.
    assert np.argmax(x[:, 0] >= 0.8 - 1e-9) * H < 0.8


def test_target_beyond_position_limits_is_clamped_and_braked_for():
    lim = limiter(lo=-1.0, hi=1.0, v=3.0, a=10.0)
    lim.reset([0.0], [0.0])
    # Target runs off at high speed beyond the limit; reference must stop at 1.0 exactly.
    ts = np.arange(1, 2000) * H
    x, v, acc = run(lim, [([5.0 * t], [5.0]) for t in ts])
    assert x.max() <= 1.0
    assert np.abs(acc).max() <= 10.0 + 1e-9
    assert x[-1, 0] == pytest.approx(1.0) and v[-1, 0] == 0.0


def test_reset_clamps_into_limits():
    lim = limiter(v=2.0)
    lim.reset([3.0], [-9.0])
    assert lim.position == [1.0] and lim.velocity == [-2.0] and lim.acceleration == [0.0]
    lim.reset([0.1])
    assert lim.velocity == [0.0]


def test_hold_brakes_at_braking_fraction_and_stops():
    lim = limiter(lo=-10.0, hi=10.0, v=3.0, a=10.0, frac=0.5)
    lim.reset([0.0], [2.0])
    xs, vs = [], []
    while not lim.hold(H):
        xs.append(lim.position[0])
        vs.append(lim.velocity[0])
    dv = np.diff([2.0, *vs])
    assert np.all(dv <= 0.0) and np.abs(dv).max() <= 5.0 * H + 1e-12
    stop = lim.position[0]
    assert stop == pytest.approx(2.0**2 / (2 * 5.0), rel=0.01)
    for _ in range(100):
        assert lim.hold(H)
    assert lim.position[0] == stop and lim.velocity == [0.0]


def test_stopping_speed_inverts_the_braking_distance():
    for d in (1e-9, 1e-4, 5.0 * H * H, 0.01, 1.0, 7.3):
        w = stopping_speed(d, 5.0, H)
        assert braking_distance(w, 5.0, H) == pytest.approx(d, rel=1e-9)
    assert stopping_speed(0.0, 5.0, H) == 0.0
    assert stopping_speed(-1.0, 5.0, H) == 0.0


@given(st.floats(0.0, 50.0), st.floats(0.1, 100.0), st.floats(0.0005, 0.05))
def test_braking_from_the_stopping_speed_stays_within_the_distance(distance, decel, dt):
    """Step by step, as the limiter moves: never past the distance (the old continuous
    formula overshot by up to decel*dt^2/8 at speeds between whole braking steps)."""
    v = stopping_speed(distance, decel, dt)
    x = 0.0
    while v > 0.0:
        x += v * dt
        v = max(0.0, v - decel * dt)
    assert x <= distance * (1 + 1e-9) + 1e-15
    assert braking_distance(stopping_speed(distance, decel, dt), decel, dt) == pytest.approx(
        distance, rel=1e-9, abs=1e-15)


def test_stopping_speed_is_monotonic_and_continuous():
    d = np.linspace(0.0, 0.01, 20001)
    w = np.array([stopping_speed(x, 5.0, H) for x in d])
    assert np.all(np.diff(w) >= 0.0)
    assert np.abs(np.diff(w)).max() <= (d[1] - d[0]) / H * (1 + 1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-50, 50), st.floats(-100, 100)), min_size=1, max_size=80),
       st.floats(0.0005, 0.02), st.floats(0.1, 0.9))
def test_any_target_sequence_respects_every_limit(targets, h, frac):
    lo, hi, vmax, amax = -1.0, 1.2, 2.0, 10.0
    lim = ReferenceLimiter([lo, lo], [hi, hi], [vmax, vmax], [amax, amax], frac)
    lim.reset([0.5, -0.5], [1.5, -2.5])
    prev_x, prev_v = list(lim.position), list(lim.velocity)
    for p, v in targets:
        for _ in range(5):
            lim.step(h, [p, -p], [v, -v])
            for j in range(2):
                x, vel = lim.position[j], lim.velocity[j]
                assert lo <= x <= hi
                assert abs(vel) <= vmax + 1e-9
                assert abs(vel - prev_v[j]) <= amax * h * (1 + 1e-9)
                assert x - prev_x[j] == pytest.approx(vel * h, abs=1e-12)
            prev_x, prev_v = list(lim.position), list(lim.velocity)


def test_gripper_rate_limiter_clamps_and_limits_rate():
    g = GripperRateLimiter(0.0, 0.085, 0.1)
    assert g.step(H, 0.5) == 0.085  # first command: clamped, no history to limit from
    out = [g.step(H, 0.0) for _ in range(500)]
    assert np.all(np.diff([0.085, *out]) >= -0.1 * H - 1e-15)
    assert out[-1] == 0.0 and min(out) >= 0.0
    g.reset(-1.0)
    assert g.opening == 0.0
    g.reset(None)
    assert g.opening is None


def test_pd_effort_law_feedforward_and_saturation():
    effort, sat = pd_effort([1.0, 0.0], [0.5, 0.0], [0.9, 0.0], [0.0, 1.0], [100.0, 10.0],
                            [4.0, 2.0], [150.0, 1.0])
    assert effort == pytest.approx([100 * 0.1 + 4 * 0.5, -1.0])
    assert sat
    effort, sat = pd_effort([0.0], [0.0], [0.0], [0.0], [1.0], [1.0], [5.0], feedforward=[3.0])
    assert effort == [3.0] and not sat
    effort, sat = pd_effort([0.0], [0.0], [0.0], [0.0], [1.0], [1.0], [5.0], feedforward=[-9.0])
    assert effort == [-5.0] and sat


def test_saturate():
    assert saturate([3.0, -3.0, 0.5], [1.0, 2.0, 1.0]) == [1.0, -2.0, 0.5]


def test_a_reset_moving_towards_a_near_limit_keeps_only_a_speed_it_can_brake_from():
    """A resync after a push: the arm 8.5 cm from the limit at 1.36 rad/s (found by the
    tracker property test); the reference must still stop inside within a_max."""
    lim = ReferenceLimiter([-0.95], [0.95], [2.0], [10.0], 0.9)
    lim.reset([0.865], [1.357], dt=H)
    assert lim.velocity[0] == pytest.approx(stopping_speed(0.085, 9.0, H))
    prev = lim.velocity[0]
    for _ in range(200):
        lim.step(H, [0.95], [0.0])
        assert lim.position[0] <= 0.95 and abs(lim.velocity[0] - prev) <= 10.0 * H * (1 + 1e-9)
        prev = lim.velocity[0]
    lim.reset([0.0], [1.357], dt=H)
    assert lim.velocity == [1.357]  # far from the limits: the measured velocity is kept
