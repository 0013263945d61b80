"""JointStateCache: whole samples, the newest only, none from the future."""

from diffusion_policy_ros.control.joint_states import JointStateCache, StateDrop

ARM = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6"]
Q0 = [0.0, -1.57, 1.57, -1.57, -1.57, 0.0]


def cache() -> JointStateCache:
    return JointStateCache(ARM, "gripper_joint", future_tolerance_s=0.2, resync_after_s=1.0)


def test_keeps_whole_samples_and_the_last_gripper_opening():
    c = cache()
    assert c.update(ARM + ["gripper_joint"], Q0 + [0.05], [], 1.0, 1.0, 0.0) == (None, "")
    first = c.latest
    assert first.q_rad == Q0 and first.qd_rad_s == [0.0] * 6
    assert first.gripper_opening_m == 0.05 and first.stamp_s == 1.0
    # A message without the gripper (or with a NaN opening) keeps the last good one.
    assert c.update(ARM, [q + 0.1 for q in Q0], [0.2] * 6, 2.0, 2.0, 0.01) == (None, "")
    assert c.latest.gripper_opening_m == 0.05 and c.latest.stamp_s == 2.0
    assert first.stamp_s == 1.0, "a reader's sample is never changed by a later update"
    drop, why = c.update(ARM[:5], Q0[:5], [], 3.0, 3.0, 0.02)
    assert drop is StateDrop.MALFORMED and "lacks" in why
    drop, why = c.update(ARM, Q0[:5], [], 3.0, 3.0, 0.02)
    assert drop is StateDrop.MALFORMED and "positions" in why
    assert c.latest.stamp_s == 2.0


def test_samples_older_than_the_newest_are_dropped_while_states_come_in_order():
    c = cache()
    c.update(ARM, Q0, [], 10.0, 10.0, 0.0)
    # Replayed states 0.5-2 s old, interleaved with fresh ones: never the current state.
    for k in range(1, 50):
        t = 10.0 + 0.002 * k
        assert c.update(ARM, Q0, [], t, t, 0.002 * k) == (None, "")
        drop, why = c.update(ARM, [1.0] * 6, [], t - 0.5 - 0.03 * k, t, 0.002 * k)
        assert drop is StateDrop.OUT_OF_ORDER and "before the newest" in why
        assert c.latest.q_rad == Q0 and c.latest.stamp_s == t
    # The same stamp again (a lockstep simulator publishing a lost sample again) is taken.
    assert c.update(ARM, Q0, [], c.latest.stamp_s, 10.1, 0.1)[0] is None


def test_a_publisher_that_restarted_its_clock_is_followed_after_resync_after_s():
    c = cache()
    c.update(ARM, Q0, [], 100.0, None, 0.0)
    for k in range(100):  # in order among themselves, for 1 s: dropped
        assert c.update(ARM, Q0, [], 0.5 + 0.01 * k, None, 0.5 + 0.01 * k)[0] \
            is StateDrop.OUT_OF_ORDER
    assert c.update(ARM, Q0, [], 1.6, None, 1.6) == (None, "")
    assert c.latest.stamp_s == 1.6 and c.time_resyncs == 1


def test_old_samples_of_mixed_ages_are_never_followed_however_long_the_arm_is_silent():
    c = cache()
    c.update(ARM, Q0, [], 100.0, None, 0.0)
    for k in range(500):  # 5 s of replayed samples 0.5-2 s old, no true state
        age = 0.5 + 1.5 * (k % 16) / 15
        assert c.update(ARM, Q0, [], 100.0 - age, None, 0.01 * k)[0] is StateDrop.OUT_OF_ORDER
    assert c.latest.stamp_s == 100.0 and c.time_resyncs == 0


def test_samples_stamped_ahead_of_the_clock_are_dropped():
    c = cache()
    c.update(ARM, Q0, [], 10.0, 10.0, 0.0)
    drop, why = c.update(ARM, [1.0] * 6, [], 60.0, 10.01, 0.01)
    assert drop is StateDrop.FUTURE and "ahead of the clock" in why
    # Within the tolerance (a state stamped before its /clock arrived) it is taken; so is
    # anything while the clock is unset (no /clock yet on sim time).
    assert c.update(ARM, Q0, [], 10.15, 10.01, 0.02)[0] is None
    assert c.update(ARM, Q0, [], 50.0, None, 0.03)[0] is None
