"""The tracker's limits hold for the arm, not only for its reference.

Chunks beyond the joint limits are refused whole; the effort bounds from the measured
state keep a lagging or whipped arm under its velocity limit and inside its position
limits; an arm put elsewhere in one step (a simulator reset) is told from one that
drifted off its path. ``test/sim/test_tracker_limits_in_sim.py`` shows the same on the
simulated arm.
"""

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from diffusion_policy_ros.control import PdTracker, PdTrackerConfig, RejectReason
from diffusion_policy_ros.control.limits import MeasuredStateLimits

from .conftest import NAMES, chunk_from


def test_a_chunk_beyond_the_joint_limits_is_refused_whole(sim_factory):
    sim = sim_factory()
    sim.tick()
    # Every joint asked for 100 rad: nothing of it runs.
    d = sim.submit(chunk_from(sim.now, lambda t: 100.0))
    assert not d.accepted and d.reason is RejectReason.OUT_OF_LIMITS
    assert "joint_1 = 100 rad" in d.detail and "chunk_limit_tolerance" in d.detail
    # One point of one joint past the tolerance is enough.
    upper = sim.config.position_upper[2] + 1.5 * sim.config.chunk_limit_tolerance
    d = sim.submit(chunk_from(sim.now, lambda t: [0.0, 0.0, upper if t > 0.5 else 0.0,
                                                  0.0, 0.0, 0.0]))
    assert not d.accepted and d.reason is RejectReason.OUT_OF_LIMITS and "joint_3" in d.detail
    d = sim.submit(chunk_from(sim.now, lambda t: 0.0, gripper=0.2))
    assert not d.accepted and "gripper opening" in d.detail
    assert sim.tracker.diagnostics()["chunks_rejected"] == {"out_of_limits": 3}
    sim.run(0.5)
    assert all(c.q_ref == (0.0,) * 6 for _, c in sim.log)
    # Within the tolerance it is taken, clamped inside position_margin.
    edge = [hi + 0.5 * sim.config.chunk_limit_tolerance for hi in sim.config.position_upper]
    assert sim.submit(chunk_from(sim.now, lambda t: edge)).accepted


def test_effort_bounds_leave_a_tracking_arm_alone():
    """Within the bounds the PD law passes unchanged: the bound is the PD law with its
    velocity command clamped."""
    limits = MeasuredStateLimits([-6.0] * 6, [6.0] * 6, [2.5] * 6, [10.0] * 6, [40.0] * 6)
    effort = [30.0, -30.0, 0.0, 5.0, -5.0, 100.0]
    assert not limits.bound(effort, [0.0] * 6, [1.0, -1.0, 0.0, 0.5, -0.5, 0.0], [150.0] * 6)
    assert effort == [30.0, -30.0, 0.0, 5.0, -5.0, 100.0]


def test_effort_bounds_brake_an_arm_over_its_speed_and_before_its_position_limits():
    limits = MeasuredStateLimits([-3.0], [3.0], [2.5], [10.0], [40.0])
    # Faster than the bound: no effort may push on; the law brakes instead.
    effort = [150.0]
    assert limits.bound(effort, [0.0], [3.0], [150.0])
    assert effort == [pytest.approx(40.0 * (2.5 - 3.0))]
    # Close to the upper limit, moving towards it: the speed that can still stop there.
    lo, hi = limits.velocity_bounds(0, 2.95)
    assert hi == pytest.approx(math.sqrt(2 * 10.0 * 0.05)) and lo == -2.5
    # Past the limit: the bound points back inside.
    lo, hi = limits.velocity_bounds(0, 3.1)
    assert hi < 0.0
    # Feedforward (gravity, reference acceleration) passes the bound.
    effort = [20.0]
    assert not limits.bound(effort, [0.0], [2.5], [150.0], feedforward=[20.0])


@settings(max_examples=200, deadline=None)
@given(q=st.floats(-4.0, 4.0), qd=st.floats(-10.0, 10.0), e=st.floats(-150.0, 150.0))
@example(q=-4.0, qd=3.0, e=0.0)  # beyond a limit: both bounds point back inside
def test_bounded_effort_never_pushes_past_a_bound_nor_past_the_effort_limit(q, qd, e):
    limits = MeasuredStateLimits([-3.0], [3.0], [2.5], [10.0], [40.0])
    effort = [e]
    limits.bound(effort, [q], [qd], [150.0])
    lo, hi = limits.velocity_bounds(0, q)
    assert -150.0 <= effort[0] <= 150.0
    if qd >= hi:
        assert effort[0] <= 0.0
    if qd <= lo:
        assert effort[0] >= 0.0


def test_a_reset_arm_is_a_position_jump_a_blocked_arm_a_path_abort():
    tracker = PdTracker(PdTrackerConfig())
    q = [0.0] * 6
    for k in range(5):
        tracker.tick(0.002 * k, q, [0.0] * 6, 0.002 * k)
    # Put 1 rad away in one step: a reset, not a push.
    tracker.tick(0.010, [1.0] + q[1:], [0.0] * 6, 0.010)
    info = tracker.diagnostics()
    assert info["path_aborts"] == 1 and info["position_jumps"] == 1
    # Drifting away over many steps at a speed an arm can have: a path abort.
    x = 1.0
    for k in range(6, 200):
        x += 0.004
        tracker.tick(0.002 * k, [x] + q[1:], [2.0] + [0.0] * 5, 0.002 * k)
    info = tracker.diagnostics()
    assert info["path_aborts"] == 2 and info["position_jumps"] == 1


def test_the_reference_moves_at_velocity_fraction_of_the_limit(sim_factory):
    config = PdTrackerConfig(velocity_fraction=0.5)
    sim = sim_factory(config)
    sim.tick()
    assert sim.submit(chunk_from(sim.now, lambda t: 3.0, names=NAMES)).accepted
    sim.run(2.0)
    top = max(abs(v) for _, c in sim.log for v in c.qd_ref)
    assert top == pytest.approx(0.5 * math.pi, rel=1e-6)
