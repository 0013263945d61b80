import pytest

from diffusion_policy_ros.perception.frame_schedule import FrameRateSchedule

MS = 1_000_000


def due_stamps(schedule, stamps_ns):
    """The due frames; ``would_take`` says the same before each frame is taken."""
    due = []
    for s in stamps_ns:
        expected = schedule.would_take(s)
        assert schedule.on_frame(s) == expected
        if expected:
            due.append(s)
    return due


def frames(period_ms, count, start_ms=0.0, jitter_ms=()):
    jitter = list(jitter_ms) + [0.0] * count
    return [round((start_ms + i * period_ms + jitter[i]) * MS) for i in range(count)]


def test_30_hz_frames_start_every_third_chunk_at_10_hz():
    stamps = frames(1000 / 30, 31, start_ms=5.0)
    assert due_stamps(FrameRateSchedule(10.0), stamps) == stamps[::3]


def test_jittered_frames_keep_the_rate_and_never_start_twice_within_half_a_period():
    jitter = [(-1.5, 2.0, 0.7, -2.2, 1.1)[i % 5] for i in range(300)]
    stamps = frames(1000 / 30, 300, jitter_ms=jitter)
    due = due_stamps(FrameRateSchedule(10.0), stamps)
    assert len(due) == pytest.approx(100, abs=1)
    gaps_ms = [(b - a) / MS for a, b in zip(due, due[1:], strict=False)]
    assert min(gaps_ms) > 90 and max(gaps_ms) < 110


def test_sim_frames_on_2_ms_steps_and_dropped_frames_start_no_chunk_early():
    # sim_node's 30 Hz on 2 ms physics steps: 34, 34, 32 ms; every 7th frame lost.
    stamps_ms = [0]
    for i in range(299):
        stamps_ms.append(stamps_ms[-1] + (34, 34, 32)[i % 3])
    kept = [round(t * MS) for i, t in enumerate(stamps_ms) if i % 7 != 3]
    due = due_stamps(FrameRateSchedule(10.0), kept)
    gaps_ms = [(b - a) / MS for a, b in zip(due, due[1:], strict=False)]
    assert min(gaps_ms) >= 80, gaps_ms
    assert 0.85 * stamps_ms[-1] / 100 <= len(due) <= stamps_ms[-1] / 100 + 1


@pytest.mark.parametrize("camera_hz", [15.0, 25.0, 60.0])
def test_other_camera_rates_average_the_asked_rate(camera_hz):
    stamps = frames(1000 / camera_hz, int(10 * camera_hz) + 1)
    due = due_stamps(FrameRateSchedule(10.0), stamps)
    assert len(due) == pytest.approx(100, rel=0.05)


def test_a_gap_restarts_the_phase_and_a_stamp_going_back_starts_a_new_stream():
    s = FrameRateSchedule(10.0)
    assert due_stamps(s, frames(1000 / 30, 4)) == [0, 100 * MS]
    assert s.on_frame(100 * MS) is False  # the same frame again
    assert s.on_frame(1000 * MS) is True  # 0.9 s without frames: due at once
    assert s.on_frame(1033 * MS) is False
    assert s.on_frame(1067 * MS) is False
    assert s.on_frame(1100 * MS) is True
    assert s.on_frame(50 * MS) is True  # the clock went back (bag loop, reset)
    assert s.on_frame(83 * MS) is False
    s.restart()
    assert s.on_frame(90 * MS) is True


@pytest.mark.parametrize("jitter_ms", [0.0, 0.5, 3.0])
def test_a_stream_already_at_the_rate_keeps_every_frame(jitter_ms):
    # rgbd_sync_node at output_rate_hz 10 feeding policy_node at rate_hz 10: a frame
    # stamped a little less than a period after the last one is due all the same.
    jitter = [(-jitter_ms, jitter_ms)[i % 2] for i in range(100)]
    stamps = frames(100.0, 100, jitter_ms=jitter)
    assert due_stamps(FrameRateSchedule(10.0), stamps) == stamps


def test_two_schedules_in_a_row_pick_the_same_frames():
    stamps_ms = [0]
    for i in range(299):
        stamps_ms.append(stamps_ms[-1] + (34, 34, 32)[i % 3])
    first = due_stamps(FrameRateSchedule(10.0), [round(t * MS) for t in stamps_ms])
    assert due_stamps(FrameRateSchedule(10.0), first) == first


def test_rate_must_be_positive():
    with pytest.raises(ValueError):
        FrameRateSchedule(0.0)
