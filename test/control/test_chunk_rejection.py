"""Every rejection class: counted, with a reason, and the current motion is unaffected."""

import dataclasses
import math

import pytest

from diffusion_policy_ros.control import ActionChunk, RejectReason, TrackerMode

NAMES = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper_joint"]


def good_rows(n=16, value=0.2):
    return [[value] * 6 + [0.04] for _ in range(n)]


def bad_chunks(now):
    """(expected reason, chunk) for every class; stamps are fresh unless the class is age."""
    s = now - 0.05
    times = [0.1 * k for k in range(16)]
    rows = good_rows()
    nan_rows = good_rows()
    nan_rows[5][2] = math.nan
    inf_rows = good_rows()
    inf_rows[0][6] = math.inf
    short_row = good_rows()
    short_row[3] = short_row[3][:6]
    return [
        (RejectReason.EMPTY, ActionChunk(s, NAMES, [], [])),
        (RejectReason.UNKNOWN_JOINT, ActionChunk(s, [*NAMES[:6], "finger"], times, rows)),
        (RejectReason.UNKNOWN_JOINT, ActionChunk(s, [*NAMES, "joint_7"], times,
                                                 [r + [0.0] for r in rows])),
        (RejectReason.MISSING_JOINT, ActionChunk(s, NAMES[:6], times, [r[:6] for r in rows])),
        (RejectReason.MISSING_JOINT, ActionChunk(s, NAMES[1:], times, [r[1:] for r in rows])),
        (RejectReason.DUPLICATE_JOINT, ActionChunk(s, [*NAMES[:6], "joint_1"], times, rows)),
        (RejectReason.WRONG_POSITION_COUNT, ActionChunk(s, NAMES, times[:15], rows)),
        (RejectReason.WRONG_POSITION_COUNT, ActionChunk(s, NAMES, times, short_row)),
        (RejectReason.NON_FINITE, ActionChunk(s, NAMES, times, nan_rows)),
        (RejectReason.NON_FINITE, ActionChunk(s, NAMES, times, inf_rows)),
        (RejectReason.NON_FINITE, ActionChunk(math.nan, NAMES, times, rows)),
        (RejectReason.NON_FINITE, ActionChunk(s, NAMES, [*times[:15], math.inf], rows)),
        (RejectReason.NON_FINITE, ActionChunk(s, NAMES, times, [["x"] * 7] * 16)),
        (RejectReason.NON_INCREASING_TIME, ActionChunk(s, NAMES, [*times[:5], times[4],
                                                                  *times[6:]], rows)),
        (RejectReason.NON_INCREASING_TIME, ActionChunk(s, NAMES, times[::-1], rows)),
        (RejectReason.STAMP_TOO_OLD, ActionChunk(now - 0.6, NAMES, times, rows)),
        (RejectReason.STAMP_TOO_OLD, ActionChunk(now - 100.0, NAMES, times, rows)),
        (RejectReason.STAMP_IN_FUTURE, ActionChunk(now + 0.2, NAMES, times, rows)),
        (RejectReason.STAMP_IN_FUTURE, ActionChunk(now + 1.0e6, NAMES, times, rows)),
        (RejectReason.NO_FUTURE_POINTS, ActionChunk(now - 0.45, NAMES, times[:3], rows[:3])),
    ]


def test_every_class_rejected_counted_and_motion_unaffected(sim_factory, chunk):
    """A twin tracker that never saw the bad chunks produces the identical command stream."""
    sims = [sim_factory(), sim_factory()]
    first = chunk(0.0, lambda t: 0.3 * math.sin(t))
    for s in sims:
        s.run(0.3)
        assert s.submit(first).accepted  # 0.3 s old: points 0..2 dropped
        s.run(0.2)
    expected = {}
    for reason, bad in bad_chunks(sims[0].now):
        decision = sims[0].submit(bad)
        assert not decision.accepted
        assert decision.reason is reason, (reason, decision)
        assert decision.detail
        expected[reason] = expected.get(reason, 0) + 1
        for s in sims:
            s.tick()
    assert dict(sims[0].tracker.timeline.rejected) == expected
    diag = sims[0].tracker.diagnostics()
    assert diag["chunks_rejected"] == {r.value: n for r, n in expected.items()}
    assert diag["last_rejection"].startswith("no_future_points")
    assert sims[1].tracker.timeline.rejected == {}
    for (_, a), (_, b) in zip(sims[0].log, sims[1].log, strict=True):
        assert a == b
    assert sims[0].log[-1][1].mode is TrackerMode.TRACKING


def test_same_stamp_and_not_newer_reject_repeats_and_reordered_chunks(sim_factory, chunk):
    sim = sim_factory()
    sim.run(0.1)
    assert sim.submit(chunk(0.05, lambda t: 0.1)).accepted
    sim.run(0.01)
    # A second chunk from the same observation (the policy ticked before a new frame).
    again = sim.submit(chunk(0.05, lambda t: 0.1))
    assert again.reason is RejectReason.SAME_STAMP
    older = sim.submit(chunk(0.0, lambda t: 0.1))
    assert older.reason is RejectReason.NOT_NEWER
    assert sim.submit(chunk(0.051, lambda t: 0.1)).accepted


def test_state_unavailable_before_first_state_and_in_fault(sim_factory, chunk):
    sim = sim_factory()
    assert sim.submit(chunk(0.0, lambda t: 0.1)).reason is RejectReason.STATE_UNAVAILABLE
    sim.tick()
    assert sim.submit(chunk(sim.now, lambda t: 0.1)).accepted
    sim.run(0.2)
    sim.tick(stamp=sim.now - 1.0)  # stale joint state
    d = sim.submit(chunk(sim.now, lambda t: 0.1))
    assert d.reason is RejectReason.STATE_UNAVAILABLE


def test_structural_checks_come_before_state_check(sim_factory):
    """A malformed chunk is counted as malformed even while the state is missing."""
    sim = sim_factory()
    d = sim.submit(ActionChunk(0.0, NAMES, [], []))
    assert d.reason is RejectReason.EMPTY


def test_joint_order_of_the_chunk_is_mapped_to_configured_order(sim_factory):
    sim = sim_factory()
    sim.tick()
    names = NAMES[::-1]  # gripper first, joint_6 ... joint_1
    targets = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    row = [0.03] + targets[::-1]
    ch = ActionChunk(sim.now, names, [0.1 * k for k in range(16)], [row] * 16)
    assert sim.submit(ch).accepted
    sim.run(2.0)
    cmd = sim.log[-1][1]
    assert cmd.q_ref == pytest.approx(targets, abs=1e-4)
    assert cmd.gripper_opening_m == pytest.approx(0.03)


def test_validate_chunk_accepts_tuples_and_numpy_like_rows(sim_factory):
    import numpy as np

    sim = sim_factory()
    sim.tick()
    rows = np.full((16, 7), 0.1)
    rows[:, 6] = 0.04
    ch = ActionChunk(sim.now, tuple(NAMES), np.arange(16) * 0.1, rows)
    assert sim.submit(ch).accepted
    assert sim.submit(dataclasses.replace(ch, stamp_s=sim.now + 0.001)).accepted
