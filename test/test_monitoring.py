"""Counters behind every node's diagnostics and throttled error messages."""

import pytest

from diffusion_policy_ros.monitoring import RateMeter, RollingStats, ThrottledReasons


def test_throttled_reasons_count_everything_and_log_each_reason_once_per_period():
    reasons = ThrottledReasons(period_s=2.0)
    logged = [reasons.record("non_finite", t) for t in (0.0, 0.5, 1.99, 2.0, 2.1, 4.5)]
    assert logged == [True, False, False, True, False, True]
    # Another reason has its own period: a flood of one never hides the other.
    assert reasons.record("wrong_length", 0.6) and not reasons.record("wrong_length", 1.0)
    assert reasons.counts == {"non_finite": 6, "wrong_length": 2}


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
