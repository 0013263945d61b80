"""ObservationHistory: stamp pairing, To-frame selection one dt apart, refusals (no ROS)."""

import threading

import numpy as np
import pytest

from diffusion_policy_ros.acting.observation_history import (
    FUTURE_OBSERVATION,
    NO_JOINT_STATE,
    NO_OBSERVATION,
    NON_FINITE_JOINT_STATE,
    NON_FINITE_POINTS,
    STALE_JOINT_STATE,
    STALE_OBSERVATION,
    ObservationHistory,
    Refusal,
    Selection,
)

NAMES = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper_joint"]
MS = 1_000_000
T0 = 1_000_000 * MS  # 1000 s: stamps never start at 0
CAMERA_NS = 33_333_333


def image(value: int) -> np.ndarray:
    return np.full((4, 4, 3), value % 256, np.uint8)


def cloud(value: float, nan: bool = False) -> tuple[np.ndarray, np.ndarray]:
    points = np.full((8, 3), value, np.float32)
    if nan:
        points[3, 1] = np.nan
    return points, np.zeros((8, 3), np.uint8)


def add_frame(h, stamp_ns, value=0, points_first=False, nan=False):
    if points_first:
        h.add_points(stamp_ns, *cloud(value, nan))
        h.add_image(stamp_ns, image(value))
    else:
        h.add_image(stamp_ns, image(value))
        h.add_points(stamp_ns, *cloud(value, nan))


def add_joints(h, stamp_ns, value):
    # Published in another order than the policy's: the history reorders.
    order = list(reversed(NAMES))
    assert h.add_joint_state(stamp_ns, order, [value + NAMES.index(n) for n in order]) == ""


def stream(h, seconds=1.0, camera_ns=CAMERA_NS, joint_ns=10 * MS, start=T0):
    """30 Hz frames (value = frame index) and 100 Hz joint_states (value = stamp in s)."""
    t = start
    while t <= start + int(seconds * 1e9):
        add_joints(h, t, t * 1e-9)
        t += joint_ns
    stamps = list(range(start, start + int(seconds * 1e9) + 1, camera_ns))
    for i, s in enumerate(stamps):
        add_frame(h, s, i, points_first=i % 2 == 1)
    return stamps


def test_pairs_by_exact_stamp_in_either_order_and_counts_unpaired():
    h = ObservationHistory(NAMES)
    assert h.add_image(T0, image(1)) is False
    assert h.add_points(T0 + 1, *cloud(1.0)) is False  # 1 ns off: not a pair
    assert len(h) == 0 and h.pending == (1, 1)
    # The half that completes a frame says so (what starts a chunk on observation ticks).
    assert h.add_points(T0 + 10 * MS, *cloud(0.0)) is False
    assert h.add_image(T0 + 10 * MS, image(0)) is True
    assert h.add_image(T0 + 20 * MS, image(0)) is False
    assert h.add_points(T0 + 20 * MS, *cloud(0.0)) is True
    assert len(h) == 2 and h.paired_total == 2
    # Halves older than pair_timeout_s behind the newest frame are given up.
    add_frame(h, T0 + 300 * MS)
    assert h.pending == (0, 0)
    assert h.drops["unpaired_image"] == 1 and h.drops["unpaired_points"] == 1
    assert h.add_image(T0 + 300 * MS, image(9)) is False
    assert h.drops["duplicate_image"] == 1 and len(h) == 3


def test_pending_queue_is_bounded():
    h = ObservationHistory(NAMES, max_pending=3)
    for i in range(10):
        h.add_image(T0 + i * MS, image(i))
    assert h.pending == (3, 0) and h.drops["unpaired_image"] == 7


def test_selects_newest_and_the_frame_closest_to_one_dt_before():
    h = ObservationHistory(NAMES)
    stamps = stream(h, seconds=1.0)
    newest = stamps[-1]
    sel = h.select(newest + 5 * MS, n_obs_steps=2, dt_s=0.1, max_age_s=0.5)
    assert isinstance(sel, Selection)
    assert sel.stamp_ns == newest
    # 30 Hz: frames 3 periods (100 ms) apart exist exactly.
    assert sel.frame_stamps_ns == (stamps[-4], newest)
    assert sel.offsets_s[0] == pytest.approx(0.0, abs=1e-6) and not sel.short
    # Oldest first, each with the latest joint_states at or before its stamp.
    older, latest = sel.observations
    assert older["image"][0, 0, 0] == len(stamps) - 4
    assert latest["image"][0, 0, 0] == len(stamps) - 1
    for obs, stamp in zip(sel.observations, sel.frame_stamps_ns, strict=True):
        js_stamp = (stamp - T0) // (10 * MS) * (10 * MS) + T0
        assert obs["joint_positions"] == pytest.approx(js_stamp * 1e-9 + np.arange(7))
        assert obs["points"].shape == (8, 3) and obs["point_colors"].dtype == np.uint8


def test_three_frames_at_irregular_stamps_pick_the_closest():
    h = ObservationHistory(NAMES)
    for ms in (0, 40, 95, 130, 190, 230):
        add_joints(h, T0 + ms * MS, 0.0)
        add_frame(h, T0 + ms * MS, ms)
    sel = h.select(T0 + 240 * MS, n_obs_steps=3, dt_s=0.1, max_age_s=0.5)
    # Targets 230, 130, 30 ms -> 230, 130, 40.
    assert sel.frame_stamps_ns == (T0 + 40 * MS, T0 + 130 * MS, T0 + 230 * MS)
    assert sel.offsets_s == pytest.approx((0.010, 0.0, 0.0))
    assert not sel.short


def test_short_history_pads_with_the_oldest_frame_as_training_does():
    h = ObservationHistory(NAMES)
    add_joints(h, T0, 0.0)
    add_frame(h, T0, 1)
    sel = h.select(T0, n_obs_steps=2, dt_s=0.1, max_age_s=0.5)
    assert sel.frame_stamps_ns == (T0, T0) and sel.short
    add_frame(h, T0 + CAMERA_NS, 2)
    sel = h.select(T0 + CAMERA_NS, n_obs_steps=2, dt_s=0.1, max_age_s=0.5)
    assert sel.frame_stamps_ns == (T0, T0 + CAMERA_NS) and sel.short


def test_refusals_name_the_reason():
    h = ObservationHistory(NAMES)
    r = h.select(T0, 2, 0.1, 0.5)
    assert isinstance(r, Refusal) and r.reason == NO_OBSERVATION
    h.add_image(T0, image(0))
    assert "1 images" in h.select(T0, 2, 0.1, 0.5).detail
    h.add_points(T0, *cloud(0.0))
    assert h.select(T0, 2, 0.1, 0.5).reason == NO_JOINT_STATE
    add_joints(h, T0 - 800 * MS, 0.0)
    r = h.select(T0, 2, 0.1, 0.5)
    assert r.reason == STALE_JOINT_STATE and "0.800 s older" in r.detail
    add_joints(h, T0 - 1 * MS, 0.0)
    assert isinstance(h.select(T0, 2, 0.1, 0.5), Selection)
    r = h.select(T0 + 600 * MS, 2, 0.1, 0.5)
    assert r.reason == STALE_OBSERVATION and "0.600 s old" in r.detail
    assert h.select(T0 - 600 * MS, 2, 0.1, 0.5).reason == FUTURE_OBSERVATION


def test_non_finite_inputs_are_refused_while_selected():
    h = ObservationHistory(NAMES)
    add_joints(h, T0 - MS, 0.0)
    add_frame(h, T0, nan=True)
    assert h.non_finite_frames == 1
    for ms in (33, 66, 100, 133):
        add_frame(h, T0 + ms * MS)
    # Newest 133 ms + the one closest to 33 ms: both finite.
    assert isinstance(h.select(T0 + 133 * MS, 2, 0.1, 0.5), Selection)
    # Newest 100 ms pairs with the NaN frame at 0 ms.
    h2 = ObservationHistory(NAMES)
    add_joints(h2, T0 - MS, 0.0)
    add_frame(h2, T0, nan=True)
    add_frame(h2, T0 + 100 * MS)
    r = h2.select(T0 + 100 * MS, 2, 0.1, 0.5)
    assert r.reason == NON_FINITE_POINTS and "NaN" in r.detail
    add_joints(h, T0 + 120 * MS, float("nan"))
    assert h.select(T0 + 133 * MS, 2, 0.1, 0.5).reason == NON_FINITE_JOINT_STATE


def test_bad_joint_states_are_reported_and_counted():
    h = ObservationHistory(NAMES)
    assert "lacks ['gripper_joint']" in h.add_joint_state(T0, NAMES[:6], [0.0] * 6)
    assert "7 names but 6 positions" in h.add_joint_state(T0, NAMES, [0.0] * 6)
    assert h.drops["bad_joint_states"] == 2


def test_out_of_order_joint_states_are_kept_sorted():
    h = ObservationHistory(NAMES)
    add_joints(h, T0 + 20 * MS, 2.0)
    add_joints(h, T0 + 10 * MS, 1.0)  # arrives late
    add_frame(h, T0 + 15 * MS)
    sel = h.select(T0 + 20 * MS, 1, 0.1, 0.5)
    assert sel.observations[0]["joint_positions"][0] == 1.0


def test_history_is_trimmed_to_keep_s_and_clock_jumps_restart_it():
    h = ObservationHistory(NAMES, keep_s=0.5)
    stamps = stream(h, seconds=2.0)
    assert len(h) == 16  # 0.5 s of 30 Hz frames
    assert h.newest_stamp_ns == stamps[-1]
    # A bag loop: stamps 2 s back restart the history instead of mixing episodes.
    add_frame(h, T0, 0)
    assert len(h) == 1 and h.drops["clock_jump_camera"] == 1
    add_joints(h, T0, 0.0)
    assert h.drops["clock_jump_joint_states"] == 1
    sel = h.select(T0, 2, 0.1, 0.5)
    assert sel.frame_stamps_ns == (T0, T0)


def test_restart_drops_what_came_before_and_pads_from_the_new_first_frame():
    h = ObservationHistory(NAMES, keep_s=2.0)
    stamps = stream(h, seconds=1.0)
    cut = stamps[-1] + 5 * MS  # a new instruction: the sim reset the scene here
    assert not h.awaiting_first_frame(cut, 0.5)  # never restarted: a missing camera
    h.restart(cut)
    assert h.generation == 1 and len(h) == 0
    r = h.select(cut + 200 * MS, 2, 0.1, 0.5)
    assert r.reason == NO_OBSERVATION and "since the restart for a new task 0.200 s ago" \
        in r.detail
    # The new task's first frame is on its way for max_obs_age_s, then it is missing.
    assert h.awaiting_first_frame(cut + 500 * MS, 0.5)
    assert not h.awaiting_first_frame(cut + 501 * MS, 0.5)
    # In flight from before the reset: the last old frame and joint_states are dropped.
    add_frame(h, stamps[-1], 99)
    add_joints(h, stamps[-1], 0.0)
    assert len(h) == 0 and h.drops["before_restart"] == 3
    add_joints(h, cut, 5.0)
    add_frame(h, cut + MS, 7)
    sel = h.select(cut + MS, 2, 0.1, 0.5)
    assert not h.awaiting_first_frame(cut + MS, 0.5)
    assert sel.frame_stamps_ns == (cut + MS, cut + MS) and sel.short
    assert sel.observations[0]["image"][0, 0, 0] == 7
    assert sel.observations[0]["joint_positions"][0] == 5.0
    # A bag loop far behind the cut is a new clock, not a stale frame, and no longer the
    # new task's first frame on its way.
    h.restart(cut + 2 * MS)
    assert h.awaiting_first_frame(cut + 2 * MS, 0.5)
    h.add_image(T0, image(3))
    assert not h.awaiting_first_frame(T0, 0.5) and not h.awaiting_first_frame(cut + 2 * MS, 0.5)
    h.add_points(T0, *cloud(3.0))
    assert len(h) == 1 and h.drops["before_restart"] == 3


def test_concurrent_adds_and_selects_stay_consistent():
    h = ObservationHistory(NAMES, keep_s=0.5)
    add_joints(h, T0 - MS, 0.0)
    errors = []

    def producer():
        try:
            for i in range(600):
                add_frame(h, T0 + i * CAMERA_NS, i, points_first=i % 3 == 0)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=producer)
    thread.start()
    selections, attempts = 0, 0
    while thread.is_alive() or attempts == 0:
        newest = h.newest_stamp_ns
        if newest is None:
            continue
        attempts += 1
        sel = h.select(newest, 2, 0.1, 100.0)
        if isinstance(sel, Selection):
            assert sel.frame_stamps_ns[0] <= sel.frame_stamps_ns[1]
            selections += 1
    thread.join()
    assert not errors and h.paired_total == 600
    assert selections == attempts
