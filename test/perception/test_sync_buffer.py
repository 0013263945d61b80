import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diffusion_policy_ros.perception.sync_buffer import RgbdSyncBuffer

MS = 1_000_000
PERIOD = 33 * MS


def feed(buf, events):
    out = []
    for kind, stamp in events:
        add = buf.add_color if kind == "c" else buf.add_depth
        out += add(stamp, (kind, stamp))
    return out


def test_pairs_nearest_depth_within_skew_with_colour_stamp():
    buf = RgbdSyncBuffer(max_skew_s=0.010)
    pairs = feed(buf, [("c", 0), ("d", 4 * MS), ("d", PERIOD - 3 * MS), ("c", PERIOD)])
    assert [(p.stamp_ns, p.depth[1], p.skew_ns) for p in pairs] == [
        (0, 4 * MS, 4 * MS), (PERIOD, PERIOD - 3 * MS, -3 * MS)]


def test_a_colour_frame_is_pending_until_its_depth_comes():
    buf = RgbdSyncBuffer(max_skew_s=0.010)
    assert feed(buf, [("c", PERIOD)]) == [] and buf.is_pending("color", PERIOD)
    assert not buf.is_pending("color", 2 * PERIOD) and not buf.is_pending("depth", PERIOD)
    assert len(feed(buf, [("d", PERIOD + MS)])) == 1
    assert not buf.is_pending("color", PERIOD)


def test_jittered_streams_with_missing_frames():
    rng = np.random.default_rng(0)
    buf = RgbdSyncBuffer(max_skew_s=0.010)
    events, expected = [], []
    for i in range(100):
        t = 1_000 * MS + i * PERIOD
        jitter = int(rng.uniform(-4, 4) * MS)
        drop_depth = i % 17 == 5
        events.append(("c", t))
        if not drop_depth:
            events.append(("d", t + jitter))
            expected.append(t)
        if i % 2:
            events[-1], events[-2] = events[-2], events[-1]
    pairs = feed(buf, events)
    assert [p.stamp_ns for p in pairs] == expected
    assert all(abs(p.skew_ns) <= 10 * MS for p in pairs)
    assert buf.drops["unmatched_color"] == 100 - len(expected) - buf.pending("color")


def test_skew_beyond_limit_never_pairs():
    buf = RgbdSyncBuffer(max_skew_s=0.010, max_age_s=0.1)
    pairs = feed(buf, [("c", 0), ("d", 11 * MS), ("c", 200 * MS), ("d", 200 * MS)])
    assert [p.stamp_ns for p in pairs] == [200 * MS]
    assert buf.drops["unmatched_color"] == 1 and buf.drops["unmatched_depth"] == 1


def test_duplicate_stamps_are_dropped():
    buf = RgbdSyncBuffer()
    pairs = feed(buf, [("c", 0), ("c", 0), ("d", 0), ("d", 0), ("c", 0)])
    assert len(pairs) == 1
    assert buf.drops["duplicate_stamp"] + buf.drops["late"] == 3


def test_out_of_order_within_age_still_pairs_and_output_is_monotonic():
    buf = RgbdSyncBuffer()
    pairs = feed(buf, [("c", PERIOD), ("c", 0), ("d", 0), ("d", PERIOD)])
    assert [p.stamp_ns for p in pairs] == [0, PERIOD]
    buf = RgbdSyncBuffer()
    pairs = feed(buf, [("c", PERIOD), ("d", PERIOD), ("c", 0), ("d", 0)])
    assert [p.stamp_ns for p in pairs] == [PERIOD]
    assert buf.drops["late"] == 2


def test_frames_older_than_max_age_are_dropped():
    buf = RgbdSyncBuffer(max_age_s=0.2)
    feed(buf, [("c", 1000 * MS), ("d", 1000 * MS)])
    assert feed(buf, [("c", 700 * MS)]) == []
    assert buf.drops["too_old"] == 1


def test_clock_jump_backwards_restarts_instead_of_dropping_everything():
    buf = RgbdSyncBuffer(max_age_s=0.5, clock_jump_s=1.0)
    feed(buf, [("c", 10_000 * MS), ("d", 10_000 * MS), ("c", 10_033 * MS)])
    pairs = feed(buf, [("c", 0), ("d", 0), ("c", PERIOD), ("d", PERIOD)])
    assert [p.stamp_ns for p in pairs] == [0, PERIOD]
    assert buf.clock_jumps == 1 and buf.drops["clock_jump"] == 1


def test_overflow_drops_oldest():
    buf = RgbdSyncBuffer(capacity=3, max_age_s=5.0, clock_jump_s=10.0)
    feed(buf, [("c", i * PERIOD) for i in range(5)])
    assert buf.pending("color") == 3 and buf.drops["overflow"] == 2


def test_invalid_parameters():
    with pytest.raises(ValueError):
        RgbdSyncBuffer(max_age_s=1.0, clock_jump_s=0.5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("cd"), st.integers(0, 40), st.integers(-6, 6)),
                min_size=1, max_size=80))
def test_property_every_frame_is_paired_dropped_or_pending(events):
    buf = RgbdSyncBuffer(max_skew_s=0.005, max_age_s=0.2, capacity=8, clock_jump_s=100.0)
    stream = [(k, i * PERIOD + j * MS) for k, i, j in events]
    pairs = feed(buf, stream)
    stamps = [p.stamp_ns for p in pairs]
    assert stamps == sorted(set(stamps))
    assert all(abs(p.skew_ns) <= 5 * MS for p in pairs)
    accounted = 2 * len(pairs) + sum(buf.drops.values()) + buf.pending("color") + \
        buf.pending("depth")
    assert accounted == len(stream)
