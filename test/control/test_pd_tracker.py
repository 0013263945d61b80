"""PdTracker behaviour: latency compensation, switches, holding, resuming, faults, PD."""

import dataclasses
import math

import numpy as np
import pytest

from diffusion_policy_ros.control import (
    BLEND_STRATEGIES,
    ActionChunk,
    PdTracker,
    PdTrackerConfig,
    RejectReason,
    TrackerMode,
)

H = 1.0 / 500.0
NAMES = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper_joint"]


def refs(sim, since=0.0):
    rows = [(t, c) for t, c in sim.log if t >= since - 1e-12]
    t = np.array([r[0] for r in rows])
    q = np.array([r[1].q_ref for r in rows])
    qd = np.array([r[1].qd_ref for r in rows])
    return t, q, qd


@pytest.mark.parametrize("strategy", BLEND_STRATEGIES)
def test_past_points_are_dropped(sim_factory, strategy):
    """Points before the arrival time are never executed, however far off they are."""
    sim = sim_factory(PdTrackerConfig(blend_strategy=strategy))
    sim.run(0.3)
    stamp = sim.now - 0.25  # points 0, 1, 2 are in the past
    rows = [[0.8 if k < 3 else 0.0] * 6 + [0.04] for k in range(16)]
    d = sim.submit(ActionChunk(stamp, NAMES, [0.1 * k for k in range(16)], rows))
    assert d.accepted and d.dropped_points == 3
    assert sim.tracker.diagnostics()["points_dropped"] == 3
    sim.run(0.3)
    _, q, _ = refs(sim)
    assert np.abs(q).max() == 0.0


@pytest.mark.parametrize("strategy", BLEND_STRATEGIES)
def test_latency_compensated_ramp_is_tracked_in_absolute_time(sim_factory, chunk, strategy):
    """Chunks of a ramp arriving 120 ms late: the reference sits on the ramp, not 120 ms behind."""
    sim = sim_factory(PdTrackerConfig(blend_strategy=strategy), q0=[0.0] * 6)
    ramp = lambda t: 0.4 * t  # noqa: E731
    sim.run(0.12)
    arrivals = [(s + 0.12, chunk(s, ramp)) for s in np.arange(0.0, 3.0, 0.1)]
    decisions = sim.run(3.0, arrivals)
    assert all(d.accepted for d in decisions)
    t, q, qd = refs(sim, since=1.5)
    np.testing.assert_allclose(q[:, 0], 0.4 * t, atol=1e-3)
    np.testing.assert_allclose(qd[:, 0], 0.4, atol=2e-2)


def test_first_chunk_starts_from_the_measured_arm_position(sim_factory, chunk):
    sim = sim_factory(q0=[0.3, -0.2, 0.1, 0.0, 0.5, -0.5])
    sim.tick()
    assert sim.log[-1][1].q_ref == pytest.approx((0.3, -0.2, 0.1, 0.0, 0.5, -0.5))
    assert sim.submit(chunk(sim.now, lambda t: 0.0)).accepted
    cmd = sim.tick()
    assert np.abs(np.subtract(cmd.q_ref, (0.3, -0.2, 0.1, 0.0, 0.5, -0.5))).max() < 1e-3


def hold_scenario(sim_factory, chunk, config):
    """Fast motion, then chunks stop: returns the sim and the arrival time of the last chunk."""
    sim = sim_factory(config)
    fast = lambda t: 1.5 * t  # noqa: E731  (1.5 rad/s, inside the 2 rad/s limit)
    sim.run(0.05)
    arrivals = [(s + 0.05, chunk(s, fast)) for s in np.arange(0.0, 0.6, 0.1)]
    sim.run(0.6, arrivals)
    return sim, arrivals[-1][0]


def test_holding_decelerates_within_limits_and_holds_reached_position(
        sim_factory, chunk, narrow_config):
    config = dataclasses.replace(narrow_config, position_upper=[5.0] * 6, chunk_timeout_s=0.3)
    sim, last = hold_scenario(sim_factory, chunk, config)
    sim.run(1.0)
    modes = [c.mode for _, c in sim.log]
    t_hold = next(t for t, c in sim.log if c.mode is TrackerMode.HOLDING and t > last)
    assert t_hold == pytest.approx(last + 0.3, abs=2 * H)
    assert TrackerMode.HOLDING in modes and modes[-1] is TrackerMode.HOLDING
    t, q, qd = refs(sim, since=t_hold - H)
    v0 = qd[0, 0]
    assert v0 == pytest.approx(1.5, rel=0.02)
    brake = config.braking_fraction * config.acceleration_limits[0]
    dv = np.diff(qd[:, 0])
    assert np.all(dv <= 1e-12) and np.all(dv >= -brake * H * (1 + 1e-9))
    stopped = np.argmax(qd[:, 0] == 0.0)
    assert stopped * H == pytest.approx(v0 / brake, abs=2 * H)
    # Held where it stopped: the braking distance past the hold point, not an old waypoint.
    assert q[-1, 0] - q[0, 0] == pytest.approx(v0**2 / (2 * brake), rel=0.02)
    assert np.all(q[stopped:, 0] == q[-1, 0])
    assert sim.tracker.diagnostics()["holds"] == 1


def test_resume_after_hold_starts_from_the_held_reference_not_the_old_chunk(
        sim_factory, chunk, narrow_config):
    config = dataclasses.replace(narrow_config, position_upper=[5.0] * 6, chunk_timeout_s=0.3)
    sim, _ = hold_scenario(sim_factory, chunk, config)
    sim.run(1.0)
    held = sim.log[-1][1].q_ref
    # A new chunk that continues the OLD plan's ramp (now far ahead): no lunge.
    stamp = sim.now - 0.05
    d = sim.submit(chunk(stamp, lambda t: 1.5 * t))
    assert d.accepted
    sim.run(0.5)
    t, q, qd = refs(sim, since=sim.now - 0.5)
    assert np.abs(q[0] - held).max() < 1e-3
    acc = np.diff(qd[:, 0]) / H
    assert np.abs(acc).max() <= config.acceleration_limits[0] * (1 + 1e-9)
    assert np.abs(qd).max() <= config.velocity_limits[0] + 1e-9
    assert sim.tracker.diagnostics()["resyncs"] == 0


def test_resume_resyncs_to_the_measured_arm_when_it_was_pushed(sim_factory, chunk):
    sim = sim_factory(PdTrackerConfig(path_tolerance=0.3))
    sim.tick()
    assert sim.submit(chunk(sim.now, lambda t: 0.2)).accepted
    sim.run(1.0)  # reaches 0.2, then times out and holds
    assert sim.log[-1][1].mode is TrackerMode.HOLDING
    sim.ideal_plant = False
    # Someone pushed joint_6 by 0.2 rad: past resume_resync_tolerance, within path_tolerance.
    sim.q = [0.2, 0.2, 0.2, 0.2, 0.2, 0.0]
    sim.tick()
    d = sim.submit(chunk(sim.now, lambda t: 0.2))
    assert d.accepted
    cmd = sim.tick()
    assert cmd.q_ref[5] == pytest.approx(0.0, abs=1e-3)
    assert sim.tracker.diagnostics()["resyncs"] == 1
    assert sim.tracker.diagnostics()["path_aborts"] == 0


def _tracking_a_sine(sim_factory, chunk):
    """A tracker 0.3 s into a sine chunk, tracking."""
    sim = sim_factory()
    sim.tick()
    assert sim.submit(chunk(sim.now, lambda t: 0.3 * math.sin(3 * t))).accepted
    sim.run(0.3)
    assert sim.log[-1][1].mode is TrackerMode.TRACKING
    return sim


def test_stale_joint_states_fault_zero_effort_once_and_recover(sim_factory, chunk):
    sim = _tracking_a_sine(sim_factory, chunk)
    stale = sim.now - 0.05
    sim.run(0.05)  # still fresh enough (state_timeout_s 0.1)
    assert sim.log[-1][1].mode is TrackerMode.TRACKING
    sim.ideal_plant = False
    sim.q = [0.25] * 6
    cmds = [sim.tick(stamp=stale) for _ in range(60)]
    faults = [c for c in cmds if c.mode is TrackerMode.FAULT]
    assert faults, "stale states must fault"
    first = faults[0]
    assert first.send and first.effort_nm == (0.0,) * 6 and "old" in first.fault
    assert not any(c.send for c in faults[1:])
    assert sim.tracker.diagnostics()["faults"] == 1
    d = sim.submit(chunk(sim.now, lambda t: 0.0))
    assert d.reason is RejectReason.STATE_UNAVAILABLE
    # States return: reference restarts at the measured arm, holding, commands resume.
    cmd = sim.tick()
    assert cmd.mode is TrackerMode.HOLDING and cmd.send
    assert cmd.q_ref == pytest.approx((0.25,) * 6)
    assert sim.tracker.diagnostics()["fault"] == ""
    assert sim.submit(chunk(sim.now, lambda t: 0.25)).accepted
    assert sim.tick().mode is TrackerMode.TRACKING


def test_missing_and_non_finite_states_fault(sim_factory):
    sim = sim_factory()
    tracker = sim.tracker
    cmd = tracker.tick(0.0, None, None, None)
    assert cmd.mode is TrackerMode.FAULT and cmd.send and "no joint_states" in cmd.fault
    assert not tracker.tick(0.002, None, None, None).send
    cmd = tracker.tick(0.004, [0.0] * 6, [0.0] * 6, 0.004)
    assert cmd.mode is TrackerMode.HOLDING
    cmd = tracker.tick(0.006, [0.0] * 5 + [math.nan], [0.0] * 6, 0.006)
    assert cmd.mode is TrackerMode.FAULT and cmd.send and "NaN" in cmd.fault
    with pytest.raises(ValueError):
        tracker.tick(0.008, [0.0] * 5, [0.0] * 6, 0.008)


def test_time_going_backwards_drops_the_plan_and_holds(sim_factory, chunk):
    sim = sim_factory()
    sim.tick()
    assert sim.submit(chunk(sim.now, lambda t: 0.3)).accepted
    sim.run(0.2)
    q_now = list(sim.q)
    sim.now = 0.01
    cmd = sim.tick()
    assert cmd.mode is TrackerMode.HOLDING
    assert cmd.q_ref == pytest.approx(q_now)
    assert sim.tracker.timeline.active is None
    assert sim.submit(chunk(sim.now, lambda t: 0.0)).accepted  # older stamps accepted again


def test_repeated_tick_time_does_not_integrate(sim_factory, chunk):
    sim = sim_factory()
    sim.tick()
    assert sim.submit(chunk(sim.now, lambda t: 0.3)).accepted
    sim.run(0.05)
    t = sim.now
    a = sim.tracker.tick(t, sim.q, sim.qd, t)
    b = sim.tracker.tick(t, sim.q, sim.qd, t)
    assert a.q_ref != tuple(sim.q) and b.q_ref == a.q_ref


def test_effort_is_pd_of_reference_and_saturates():
    # path_tolerance off: joint_5 sits 1 rad off its reference to saturate the effort;
    # velocity limits high enough that the catch-up speed does not bound it.
    config = PdTrackerConfig(kp=[100.0] * 6, kd=[10.0] * 6,
                             effort_limits=[150.0, 150.0, 150.0, 28.0, 28.0, 28.0],
                             velocity_limits=[50.0] * 6, path_tolerance=0.0)
    tracker = PdTracker(config)
    q = [0.0, 0.1, -0.1, 0.0, 1.0, 0.0]
    tracker.tick(0.0, [0.0] * 6, [0.0] * 6, 0.0)  # reference at 0
    cmd = tracker.tick(0.002, q, [0.0, 0.0, 0.0, 1.0, 0.0, 0.0], 0.002)
    assert cmd.effort_nm == pytest.approx((0.0, -10.0, 10.0, -10.0, -28.0, 0.0))
    assert tracker.diagnostics()["effort_saturated_ticks"] == 1
    cmd = tracker.tick(0.004, [0.0] * 6, [0.0] * 6, 0.004,
                       effort_feedforward=[1.0, 2.0, 3.0, 4.0, 500.0, -500.0])
    assert cmd.effort_nm == pytest.approx((1.0, 2.0, 3.0, 4.0, 28.0, -28.0))


def test_inertia_feedforward_uses_reference_acceleration(sim_factory, chunk):
    config = PdTrackerConfig(kp=[0.0] * 6, kd=[0.0] * 6, inertia_feedforward=[2.0] * 6)
    sim = sim_factory(config)
    sim.tick()
    assert sim.submit(chunk(sim.now, lambda t: 0.5 * t * t)).accepted
    sim.run(0.3)
    cmd = sim.tick()
    acc = sim.tracker.limiter.acceleration
    assert cmd.effort_nm == pytest.approx(tuple(2.0 * a for a in acc))
    assert acc[0] == pytest.approx(1.0, abs=0.2)


def test_gripper_is_clamped_rate_limited_and_does_not_overshoot(sim_factory, chunk):
    sim = sim_factory(gripper0=0.02)
    sim.tick()
    # Beyond both ends, within gripper_limit_tolerance (farther is refused whole).
    grip = lambda t: 0.089 if t < 0.9 else -0.004  # noqa: E731
    arrivals = [(s, chunk(s, lambda t: 0.0, gripper=grip)) for s in np.arange(0.002, 2.2, 0.1)]
    sim.run(2.2, arrivals)
    g = np.array([c.gripper_opening_m for _, c in sim.log])
    assert g[0] == pytest.approx(0.02)
    assert g.min() >= 0.0 and g.max() <= 0.085
    assert np.abs(np.diff(g)).max() <= 0.1 * H * (1 + 1e-9)
    assert g.max() == pytest.approx(0.085) and g[-1] == pytest.approx(0.0)


def test_gripper_unknown_until_measured_or_commanded():
    tracker = PdTracker(PdTrackerConfig())
    assert tracker.tick(0.0, [0.0] * 6, [0.0] * 6, 0.0).gripper_opening_m is None
    assert tracker.tick(0.002, [0.0] * 6, [0.0] * 6, 0.002, 0.05).gripper_opening_m == 0.05


def test_stalled_timer_catches_up_within_limits(sim_factory, chunk):
    sim = sim_factory()
    sim.tick()
    assert sim.submit(chunk(sim.now, lambda t: 1.0 * t)).accepted
    sim.run(0.2)
    before = sim.tracker.limiter.velocity[0]
    sim.now += 0.2  # the timer stalled for 200 ms
    cmd = sim.tick()
    assert abs(cmd.qd_ref[0] - before) <= 10.0 * 10 * H + 1e-9


def test_config_defaults_are_valid_and_bad_configs_raise():
    PdTrackerConfig().validate()
    bad = [
        dict(joint_names=["a", "a", "b", "c", "d", "e"]),
        dict(gripper_joint="joint_1"),
        dict(kp=[1.0] * 5),
        dict(position_lower=[0.0] * 6, position_upper=[0.05] * 6),
        dict(gripper_min=0.1, gripper_max=0.05),
        dict(blend_strategy="magic"),
        dict(joint_names=[]),
    ]
    for kw in bad:
        with pytest.raises(ValueError):
            PdTracker(PdTrackerConfig(**kw))


def start_state(t, value=0.0):
    from diffusion_policy_ros.control import ReferenceState

    return ReferenceState(t, [value] * 6, [0.0] * 6, [0.0] * 6)


@pytest.mark.parametrize("decay", [0.0, 10.0, -5.0])
def test_ensemble_is_the_exponentially_weighted_mean_of_live_chunks(chunk, decay):
    from diffusion_policy_ros.control import ActionChunkTimeline

    config = PdTrackerConfig(blend_strategy="ensemble", ensemble_decay_per_s=decay,
                             blend_window_s=0.1)
    tl = ActionChunkTimeline(config)
    assert tl.submit(chunk(0.0, lambda t: 0.0, gripper=0.0), 0.0, start_state(0.0)).accepted
    assert tl.submit(chunk(0.1, lambda t: 1.0, gripper=0.08), 0.1, start_state(0.1)).accepted
    w_old = math.exp(-decay * 0.1)
    expected = 1.0 / (1.0 + w_old)
    # After the fade, on a waypoint covered by both chunks (t = 0.5 s) ...
    p, v, g = tl.sample(0.5)
    assert p == pytest.approx([expected] * 6, abs=1e-9)
    assert g == pytest.approx(0.08 / (1.0 + w_old))
    # ... and beyond the old chunk's horizon (1.5 s) only the new chunk counts.
    assert tl.sample(1.6)[0][0] == pytest.approx(1.0, abs=1e-9)


def test_timeline_rejects_without_state_and_counts():
    from diffusion_policy_ros.control import ActionChunkTimeline

    tl = ActionChunkTimeline(PdTrackerConfig())
    rows = [[0.0] * 7] * 3
    d = tl.submit(ActionChunk(0.0, NAMES, [0.0, 0.1, 0.2], rows), 0.0, None)
    assert d.reason is RejectReason.STATE_UNAVAILABLE
    assert tl.rejected[RejectReason.STATE_UNAVAILABLE] == 1 and tl.active is None
    assert tl.sample(0.0) is None


@pytest.mark.parametrize("strategy", ["crossfade", "ensemble"])
def test_nested_fades_stay_shallow(sim_factory, chunk, strategy):
    sim = sim_factory(PdTrackerConfig(blend_strategy=strategy, blend_window_s=0.3))
    sim.tick()
    arrivals = [(s + 0.05, chunk(s, lambda t: 0.1 * math.sin(t))) for s in np.arange(0, 2, 0.1)]
    depths = []
    pending = list(arrivals)
    while sim.now < 2.0:
        while pending and pending[0][0] <= sim.now:
            assert sim.submit(pending.pop(0)[1]).accepted
        sim.tick()
        depths.append(sim.tracker.diagnostics()["blend_depth"])
    assert max(depths) <= 1 + math.ceil(0.3 / 0.1) + 1


def test_an_arm_far_from_its_reference_drops_the_plan_and_is_held_where_it_is(sim_factory,
                                                                               chunk):
    """A simulator reset (or a hard push) puts the arm 0.5 rad from its reference: as a
    trajectory controller past its path tolerance, the tracker drops the plan and
    re-anchors arm and gripper at the measured state instead of pulling the arm back
    to where the last plan left it and closing the gripper it had closed."""
    sim = sim_factory(PdTrackerConfig(path_tolerance=0.3), q0=[0.0] * 6)
    sim.run(0.1)
    sim.run(0.3, [(sim.now, chunk(sim.now, lambda t: 0.2, gripper=0.0))])
    assert sim.tracker.mode is TrackerMode.TRACKING
    assert sim.tracker.diagnostics()["path_aborts"] == 0  # ordinary tracking never trips it
    sim.q, sim.qd, sim.gripper0 = [-0.3] * 6, [0.0] * 6, 0.085  # teleported, gripper open
    cmd = sim.tick()
    assert cmd.mode is TrackerMode.HOLDING and sim.tracker.diagnostics()["path_aborts"] == 1
    np.testing.assert_allclose(cmd.q_ref, [-0.3] * 6)
    assert cmd.gripper_opening_m == pytest.approx(0.085)
    # A chunk planned from an observation before the abort (in flight) is not executed.
    late = sim.submit(chunk(sim.now - 0.05, lambda t: 0.2, gripper=0.0))
    assert not late.accepted and late.reason is RejectReason.BEFORE_PATH_ABORT
    sim.run(0.5)
    _, q, _ = refs(sim, since=sim.now - 0.4)
    np.testing.assert_allclose(q, -0.3, atol=1e-9)
    assert sim.log[-1][1].gripper_opening_m == pytest.approx(0.085)
    assert sim.submit(chunk(sim.now, lambda t: -0.3 + 0.1 * (t - sim.now), gripper=0.085)
                      ).accepted
    sim.run(0.5)
    assert sim.tracker.mode is TrackerMode.TRACKING
    assert sim.tracker.diagnostics()["path_aborts"] == 1


def test_path_tolerance_zero_keeps_the_plan(sim_factory, chunk):
    sim = sim_factory(PdTrackerConfig(path_tolerance=0.0), q0=[0.0] * 6)
    sim.run(0.1)
    sim.run(0.3, [(sim.now, chunk(sim.now, lambda t: 0.2))])
    reference = sim.log[-1][1].q_ref
    sim.q = [-0.3] * 6
    cmd = sim.tick()
    assert cmd.mode is TrackerMode.TRACKING and sim.tracker.diagnostics()["path_aborts"] == 0
    assert cmd.q_ref[0] == pytest.approx(reference[0], abs=0.01)


def test_late_joint_states_command_zero_effort_while_the_plan_goes_on(sim_factory, chunk):
    sim = _tracking_a_sine(sim_factory, chunk)
    sim.ideal_plant = False
    sim.q, sim.qd = [0.2] * 6, [0.5, -0.5, 1.0, 0.0, 2.0, -1.0]
    late = sim.now - 0.02  # beyond late_state_s (0.01), within state_timeout_s (0.1)
    before = sim.log[-1][1].q_ref
    cmd = sim.tick(stamp=late)
    assert cmd.mode is TrackerMode.TRACKING and cmd.send and cmd.effort_nm == (0.0,) * 6
    assert cmd.q_ref != before  # the reference moves on along the plan
    assert sim.tracker.diagnostics()["late_state_ticks"] == 1
    cmd = sim.tick()  # fresh again: PD
    assert cmd.mode is TrackerMode.TRACKING and any(cmd.effort_nm)


def test_unsafe_speed_brakes_rejects_chunks_then_holds_where_the_arm_stopped(sim_factory,
                                                                             chunk):
    sim = sim_factory()
    sim.tick()
    assert sim.submit(chunk(sim.now, lambda t: 0.1)).accepted
    sim.run(0.1)
    sim.ideal_plant = False
    limit = sim.config.overspeed_factor * sim.config.velocity_limits[1]
    sim.qd = [0.0, limit + 0.5, 0.0, 0.0, 0.0, 0.0]
    cmd = sim.tick()
    assert cmd.mode is TrackerMode.FAULT and cmd.send and "joint_2" in cmd.fault
    assert cmd.effort_nm[1] == pytest.approx(-sim.config.effort_limits[1])  # kd*v saturates
    assert sim.submit(chunk(sim.now, lambda t: 0.1)).reason is RejectReason.STATE_UNAVAILABLE
    # Still braking while any joint is faster than overspeed_resume_rad_s, even below the limit.
    sim.qd = [0.0, 0.2, 0.0, 0.0, 0.0, 0.0]
    cmd = sim.tick()
    assert cmd.mode is TrackerMode.FAULT and cmd.effort_nm[1] == pytest.approx(
        -sim.config.kd[1] * 0.2)
    sim.q, sim.qd = [0.4] * 6, [0.01] * 6
    cmd = sim.tick()
    assert cmd.mode is TrackerMode.HOLDING and cmd.q_ref == pytest.approx((0.4,) * 6)
    info = sim.tracker.diagnostics()
    assert info["overspeed_stops"] == 1 and info["fault"] == ""
    assert sim.submit(chunk(sim.now, lambda t: 0.4)).accepted


def _max_speed_with_delayed_states(config, delay_s: float, seconds: float = 3.0) -> float:
    """Tracker holding a 0.5 kg m^2 joint (passive damping 2 N m s/rad) pushed to 1 rad/s,
    its states reaching the tracker ``delay_s`` late."""
    tracker = PdTracker(config)
    inertia, friction, h = 0.5, 2.0, H
    q, qd = [0.3] * 6, [0.0] * 6
    tracker.tick(0.0, q, qd, 0.0)
    qd = [1.0] * 6
    delay = round(delay_s / h)
    history = [(-delay_s + k * h, list(q), [0.0] * 6) for k in range(delay)]
    peak = 0.0
    for i in range(1, int(seconds / h)):
        now = i * h
        history.append((now, list(q), list(qd)))
        stamp, q_seen, qd_seen = history[-1 - delay]
        effort = tracker.tick(now, q_seen, qd_seen, stamp).effort_nm
        qd = [v + (e - friction * v) / inertia * h for v, e in zip(qd, effort, strict=True)]
        q = [x + v * h for x, v in zip(q, qd, strict=True)]
        peak = max(peak, max(map(abs, qd)))
    return peak


def test_late_states_cannot_drive_the_loop_unstable():
    """PD on 30 ms old states turns a 1 rad/s push into an oscillation that grows until the
    efforts saturate; with the late-state hold the pushed arm only coasts to rest."""
    plain = PdTrackerConfig(late_state_s=0.0, overspeed_factor=0.0, path_tolerance=0.0)
    safe = PdTrackerConfig(path_tolerance=0.0)
    assert _max_speed_with_delayed_states(plain, 0.03) > 5.0
    assert _max_speed_with_delayed_states(safe, 0.03) <= 1.0
    assert _max_speed_with_delayed_states(safe, 0.002) <= 1.0  # fresh: held by the PD law
