"""Quintic interpolation, knot derivatives, cross-fades and the gripper line."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diffusion_policy_ros.control.trajectory import (
    CrossFade,
    PiecewiseLinear,
    QuinticSpline,
    WaypointTrajectory,
    knot_derivatives,
    quintic_coefficients,
    smoothstep5,
)

EPS = 1e-7


def poly_state(c, t):
    c0, c1, c2, c3, c4, c5 = c
    p = c0 + c1 * t + c2 * t**2 + c3 * t**3 + c4 * t**4 + c5 * t**5
    v = c1 + 2 * c2 * t + 3 * c3 * t**2 + 4 * c4 * t**3 + 5 * c5 * t**4
    a = 2 * c2 + 6 * c3 * t + 12 * c4 * t**2 + 20 * c5 * t**3
    return p, v, a


@given(st.floats(0.01, 2.0), *[st.floats(-5, 5)] * 6)
def test_quintic_matches_both_end_states(duration, p0, v0, a0, p1, v1, a1):
    c = quintic_coefficients(duration, p0, v0, a0, p1, v1, a1)
    assert poly_state(c, 0.0) == pytest.approx((p0, v0, a0), abs=1e-9)
    assert poly_state(c, duration) == pytest.approx((p1, v1, a1), rel=1e-6, abs=1e-6)


def test_knot_derivatives_exact_for_quadratics_with_uneven_spacing():
    t = np.array([0.0, 0.1, 0.25, 0.3, 0.5])
    p = (2.0 - 3.0 * t + 4.0 * t**2)[:, None]
    v, a = knot_derivatives(t, p)
    np.testing.assert_allclose(v[:-1, 0], -3.0 + 8.0 * t[:-1], atol=1e-9)
    np.testing.assert_allclose(a[:-1, 0], 8.0, atol=1e-7)
    assert v[-1, 0] == 0.0 and a[-1, 0] == 0.0  # settles on the last waypoint


def test_knot_derivatives_short_inputs():
    v, a = knot_derivatives([0.0, 0.5], np.array([[0.0], [1.0]]))
    assert v[0, 0] == pytest.approx(2.0) and a[0, 0] == 0.0 and v[1, 0] == 0.0
    v, a = knot_derivatives([0.0], np.array([[3.0]]))
    assert v[0, 0] == 0.0 and a[0, 0] == 0.0


def assert_c2_at(traj, instants, eps=1e-10, tol=1e-4):
    """Left and right limits of position, velocity and acceleration agree at ``instants``."""
    for t in instants:
        left = traj.sample3(t - eps)
        right = traj.sample3(t + eps)
        for a, b in zip(left, right, strict=True):
            np.testing.assert_allclose(a, b, atol=tol * max(1.0, np.abs(a).max()))


def test_spline_passes_through_waypoints_and_is_c2():
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.uniform(0.05, 0.15, 12))
    values = rng.normal(0, 0.3, (12, 6))
    spline = QuinticSpline.through_waypoints(times, values)
    for t, row in zip(times, values, strict=True):
        np.testing.assert_allclose(spline.sample(t)[0], row, atol=1e-9)
    assert_c2_at(spline, times)
    # Before the first knot: Taylor extension; after the last: rest on the last waypoint.
    p, v = spline.sample(times[-1] + 5.0)
    np.testing.assert_allclose(p, values[-1])
    assert v == [0.0] * 6


def test_spline_velocity_and_acceleration_agree_with_finite_differences():
    t = np.linspace(0, 1.5, 16)
    spline = QuinticSpline.through_waypoints(t, np.sin(2 * t)[:, None])
    h = 1e-6
    for tq in np.linspace(0.01, 1.2, 37):
        p, v, a = spline.sample3(tq)
        pp, vp = spline.sample(tq + h)
        pm, vm = spline.sample(tq - h)
        assert v[0] == pytest.approx((pp[0] - pm[0]) / (2 * h), abs=1e-5)
        assert a[0] == pytest.approx((vp[0] - vm[0]) / (2 * h), abs=1e-3)


def test_spline_rejects_bad_knots():
    with pytest.raises(ValueError):
        QuinticSpline([0.0, 0.0], [[0.0], [1.0]], [[0.0], [0.0]], [[0.0], [0.0]])
    with pytest.raises(ValueError):
        QuinticSpline([0.0, 1.0], [[0.0], [1.0]], [[0.0]], [[0.0], [0.0]])


def test_smoothstep_is_flat_at_both_ends():
    assert smoothstep5(0.0) == (0.0, 0.0, 0.0)
    assert smoothstep5(1.0) == (1.0, 0.0, 0.0)
    s, ds, dds = smoothstep5(1e-6)
    assert s < 1e-15 and ds < 1e-9 and abs(dds) < 1e-3
    assert smoothstep5(0.5)[0] == pytest.approx(0.5)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.floats(0.02, 0.5), st.floats(-0.2, 0.2))
def test_crossfade_is_c2_and_matches_old_then_new(seed, window, offset):
    rng = np.random.default_rng(seed)
    t_old = np.arange(16) * 0.1
    t_new = 0.13 + np.arange(16) * 0.1
    old = WaypointTrajectory(QuinticSpline.through_waypoints(t_old, rng.normal(0, 0.3, (16, 6))),
                             PiecewiseLinear(t_old, rng.uniform(0, 0.08, 16)), 0.0)
    new = WaypointTrajectory(
        QuinticSpline.through_waypoints(t_new, offset + rng.normal(0, 0.3, (16, 6))),
        PiecewiseLinear(t_new, rng.uniform(0, 0.08, 16)), 0.13)
    start = 0.2
    fade = CrossFade(old, new, start, window)
    for a, b in zip(fade.sample3(start), old.sample3(start), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-12)
    end = start + window
    for a, b in zip(fade.sample3(end + 1e-9), new.sample3(end + 1e-9), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-12)
    knots = [t for t in [*t_old, *t_new] if start < t < end]
    assert_c2_at(fade, [start, end, *knots])
    # The gripper mix stays between the two lines (no overshoot).
    for t in np.linspace(start, end, 25):
        g = fade.gripper_at(t)
        lo, hi = sorted((old.gripper_at(t), new.gripper_at(t)))
        assert lo - 1e-15 <= g <= hi + 1e-15
    assert fade.pruned(end + 0.001) is new
    assert fade.pruned(start) is fade


def test_crossfade_sample_matches_sample3():
    t = np.arange(8) * 0.1
    a = WaypointTrajectory(QuinticSpline.through_waypoints(t, np.sin(t)[:, None]),
                           PiecewiseLinear(t, t), 0.0)
    b = WaypointTrajectory(QuinticSpline.through_waypoints(t, np.cos(t)[:, None]),
                           PiecewiseLinear(t, -t), 0.0)
    fade = CrossFade(a, b, 0.2, 0.3)
    for tq in np.linspace(0.0, 0.8, 41):
        p, v = fade.sample(tq)
        p3, v3, _ = fade.sample3(tq)
        assert p == pytest.approx(p3) and v == pytest.approx(v3)


@given(st.lists(st.floats(0.0, 0.085), min_size=1, max_size=16), st.floats(-1, 3))
def test_piecewise_linear_never_leaves_waypoint_range(values, t):
    line = PiecewiseLinear([0.1 * k for k in range(len(values))], values)
    assert min(values) - 1e-15 <= line(t) <= max(values) + 1e-15


def test_piecewise_linear_interpolates():
    line = PiecewiseLinear([0.0, 1.0, 3.0], [0.0, 1.0, 0.0])
    assert line(0.5) == pytest.approx(0.5)
    assert line(2.0) == pytest.approx(0.5)
    assert line(-1.0) == 0.0 and line(9.0) == 0.0
    with pytest.raises(ValueError):
        PiecewiseLinear([], [])
