"""Counters behind every node's diagnostics and throttled error messages."""

import math

import pytest

from diffusion_policy_ros.monitoring import (
    BlockingWatch,
    LatencyStages,
    LogBudget,
    RateMeter,
    RollingStats,
    SimTimeToWall,
    ThrottledReasons,
    TokenBucket,
    cpu_per_sim_second,
    excerpt,
    process_cpu_s,
)


def test_throttled_reasons_count_everything_and_log_each_reason_once_per_period():
    reasons = ThrottledReasons(period_s=2.0)
    logged = [reasons.record("non_finite", t) for t in (0.0, 0.5, 1.99, 2.0, 2.1, 4.5)]
    assert logged == [True, False, False, True, False, True]
    # Another reason has its own period: a flood of one never hides the other.
    assert reasons.record("wrong_length", 0.6) and not reasons.record("wrong_length", 1.0)
    assert reasons.counts == {"non_finite": 6, "wrong_length": 2}
    # Counted quietly, a reason keeps its log window: the first record still logs.
    reasons.count("no_observation")
    assert reasons.record("no_observation", 5.0) and reasons.counts["no_observation"] == 2


def test_blocking_watch_counts_stalls_and_reports_the_longest_call_once():
    watch = BlockingWatch(stall_s=0.1)
    assert [watch.note(t) for t in (0.0002, 0.05, 0.1, 1.2, 0.0003)] == [False, False, True,
                                                                         True, False]
    assert watch.stalls == 2
    assert watch.take_max_s() == 1.2
    assert watch.take_max_s() == 0.0  # a report covers the calls since the last one
    watch.note(0.002)
    assert watch.take_max_s() == 0.002 and watch.stalls == 2


def test_rate_meter_counts_ticks_in_its_window_and_decays_to_zero():
    meter = RateMeter(window_s=2.0)
    assert meter.rate_hz(0.0) == 0.0
    for k in range(61):
        meter.tick(k / 30.0)
    assert meter.rate_hz(2.0) == pytest.approx(30.0, rel=0.05)
    assert meter.rate_hz(10.0) == 0.0


def test_rate_meter_on_a_clock_that_jumps_back_counts_afresh():
    """policy_node measures its chunks on the sim clock, which restarts with a bag loop."""
    meter = RateMeter(window_s=2.0)
    for k in range(20):
        meter.tick(100.0 + k / 10.0)
    assert meter.rate_hz(102.0) == pytest.approx(10.0, rel=0.1)
    meter.tick(1.0)
    assert meter.rate_hz(1.0) == pytest.approx(0.5) and meter.total == 21
    assert RateMeter().rate_hz(-1.0) == 0.0


def test_rolling_stats_keep_the_last_window():
    stats = RollingStats(window=4)
    for v in (100.0, 1.0, 2.0, 3.0, 4.0):
        stats.add(v)
    assert len(stats) == 4 and stats.max() == 4.0
    assert stats.percentile(50) == pytest.approx(2.5)


def test_process_cpu_is_read_from_proc_and_grows_with_work():
    import os
    import time

    before = process_cpu_s(os.getpid())
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert process_cpu_s(os.getpid()) >= before + 0.15
    assert process_cpu_s(2**22 + 1) is None  # above Linux's pid_max: no such process


def test_cpu_per_sim_second_skips_processes_without_readings():
    before = {"sim_node": 10.0, "policy_node": 5.0, "gone": None}
    after = {"sim_node": 16.0, "policy_node": 8.0, "gone": 3.0}
    assert cpu_per_sim_second(before, after, 4.0) == {"sim_node": 1.5, "policy_node": 0.75,
                                                      "total": 2.25}
    assert cpu_per_sim_second(before, after, 0.0) is None
    assert cpu_per_sim_second({"a": None}, {"a": 1.0}, 1.0) is None


def test_sim_time_to_wall_interpolates_between_clock_messages():
    clock = SimTimeToWall()
    assert clock.wall_ns_at(5) is None and clock.newest_sim_ns() is None  # nothing yet
    clock.add(1_000, 50_000)
    assert clock.wall_ns_at(1_000) is None  # one point is no line
    clock.add(11_000, 60_000)   # 10 us of sim time in 10 us of wall time
    clock.add(21_000, 80_000)   # then at half speed
    assert clock.wall_ns_at(6_000) == pytest.approx(55_000)
    assert clock.wall_ns_at(16_000) == pytest.approx(70_000)
    assert clock.wall_ns_at(21_001) is None and clock.wall_ns_at(999) is None
    assert clock.newest_sim_ns() == 21_000


def test_sim_time_to_wall_restarts_when_sim_time_goes_back():
    clock = SimTimeToWall(window=3)
    for sim, wall in ((100, 1_000), (200, 1_100), (200, 1_150), (300, 1_200)):
        clock.add(sim, wall)  # the repeated instant (paused sim) is not a second point
    assert clock.wall_ns_at(250) == pytest.approx(1_150)
    clock.add(50, 5_000)  # a new simulation
    assert clock.wall_ns_at(250) is None
    clock.add(60, 5_010)
    assert clock.wall_ns_at(55) == pytest.approx(5_005)


def test_latency_stages_split_the_latency_at_each_hops_publication():
    stages = LatencyStages()
    stages.frame_published(1_000_000, 9_000_000)   # stamp 1 ms; camera_info out at 9 ms
    stages.points_published(1_000_000, 16_000_000)
    stages.chunk("a", 1_000_000, 1_000_000, 28_000_000, 29_000_000)
    assert stages.stages_ms("a") == pytest.approx(
        {"frame": 8.0, "sync": 7.0, "policy": 12.0, "delivery": 1.0})
    assert sum(stages.stages_ms("a").values()) == pytest.approx(28.0)  # received - stamp


def test_latency_stages_wait_for_a_late_sample_and_give_up_on_a_lost_one():
    stages = LatencyStages()
    stages.frame_published(100, 200)
    stages.chunk("late points", 100, 100, 900, 1_000)
    assert stages.stages_ms("late points") is None  # its points may still come
    stages.points_published(100, 500)
    assert stages.stages_ms("late points")["sync"] == pytest.approx(300e-6)
    stages.chunk("lost points", 300, 300, 1_900, 2_000)
    stages.frame_published(300, 400)
    assert stages.stages_ms("lost points") is None
    stages.frame_published(400, 450)
    stages.points_published(400, 600)  # newer points: those of stamp 300 never came
    lost = stages.stages_ms("lost points")
    assert lost["frame"] == pytest.approx(100e-6) and lost["delivery"] == pytest.approx(100e-6)
    assert math.isnan(lost["sync"]) and math.isnan(lost["policy"])


def test_latency_stages_restart_with_the_stamps():
    stages = LatencyStages(keep=2)
    stages.chunk("before", 5_000, 5_000, 6_000, 6_500)
    stages.frame_published(10_000, 10_100)  # a newer stamp ...
    stages.frame_published(20, 30)  # ... then time goes back: a restarted simulation
    assert all(math.isnan(v) for k, v in stages.stages_ms("before").items() if k != "delivery")
    for stamp in (40, 50, 60):
        stages.frame_published(stamp, stamp + 10)
        stages.points_published(stamp, stamp + 20)
    stages.chunk("old", 40, 40, 100, 110)  # forgotten (keep=2): measured as lost
    assert math.isnan(stages.stages_ms("old")["frame"])


def test_latency_stages_without_a_camera_keep_few_chunks_waiting():
    stages = LatencyStages(keep=3)
    for k in range(10):  # chunks, but no camera_info or points ever
        stages.chunk(k, 100 + k, 100 + k, 200 + k, 210 + k)
    assert len(stages._pending) == 3
    assert math.isnan(stages.stages_ms(0)["frame"]) and stages.stages_ms(9) is None


def test_token_bucket_lets_a_burst_through_then_one_per_period():
    bucket = TokenBucket(burst=3, period_s=0.5)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_s(0.0) == pytest.approx(0.5)
    assert not bucket.take(0.4) and bucket.ready(0.5) and bucket.take(0.5)
    assert not bucket.take(0.6)
    # A flood of 300 a second for 3 s: the burst, then two a second.
    flooded = TokenBucket(burst=3, period_s=0.5)
    assert sum(flooded.take(k / 300) for k in range(900)) == 3 + 5
    # Idle long enough, the whole burst is back, never more.
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]
    # A clock that goes back gives nothing.
    assert not bucket.take(50.0)
    with pytest.raises(ValueError):
        TokenBucket(burst=0, period_s=1.0)


def test_log_budget_bounds_lines_per_second_and_says_how_many_were_left_out():
    budget = LogBudget(burst=5, period_s=1.0)
    allowed = [budget.allow(k / 300) for k in range(900)]  # 3 s at 300 a second
    logged = [n for n in allowed if n is not None]
    assert len(logged) == 5 + 2 and budget.left_out == 900 - 7
    last = max(k for k, n in enumerate(allowed) if n is not None)
    assert logged[:5] == [0] * 5 and sum(logged) == allowed[:last].count(None)


def test_excerpt_bounds_a_users_string_for_the_log():
    assert excerpt("pick up the red cube") == "pick up the red cube"
    long = "x" * 1_000_000
    assert excerpt(long) == "x" * 80 + "... (1000000 chars)"
    assert excerpt("a" * 80) == "a" * 80 and excerpt("ab", max_chars=1) == "a... (2 chars)"
    # A line break cannot forge a second log line.
    assert excerpt("red\n[ERROR] fake") == "red\\n[ERROR] fake"
    assert excerpt("grüner Würfel") == "grüner Würfel"
