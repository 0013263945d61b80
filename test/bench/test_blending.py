"""The offline blending comparison behind the default blend strategy (dpr bench blending)."""

import numpy as np

from diffusion_policy_ros.bench.blending import (
    SWITCH_JERK_BUDGET,
    SyntheticStream,
    choose_strategy,
    compare_blending,
    compare_blending_seeds,
    format_table,
    synthetic_chunks,
)
from diffusion_policy_ros.control import BLEND_STRATEGIES, PdTrackerConfig

METRICS = {"rms_error_rad", "max_error_rad", "rms_error_change_rad", "peak_jerk_switch",
           "peak_jerk", "rms_jerk", "peak_acc", "limited_share"}


def test_compare_blending_is_deterministic_and_complete():
    a = compare_blending(3)
    assert set(a) == {*BLEND_STRATEGIES, "latest_uncompensated"}
    for metrics in a.values():
        assert set(metrics) == METRICS
        assert all(np.isfinite(v) for v in metrics.values())
    assert compare_blending(3) == a
    assert "ensemble" in format_table(a)


def test_documented_default_wins_by_the_documented_rule():
    results = compare_blending_seeds(range(3))
    assert choose_strategy(results) == PdTrackerConfig().blend_strategy == "ensemble"
    ens, xf, latest = results["ensemble"], results["crossfade"], results["latest"]
    assert ens["peak_jerk_switch"] <= SWITCH_JERK_BUDGET < latest["peak_jerk_switch"]
    assert ens["rms_error_rad"] < xf["rms_error_rad"] < latest["rms_error_rad"]
    # The price of ensembling: slower reaction to a sudden change of plan.
    assert ens["rms_error_change_rad"] > latest["rms_error_change_rad"]


def test_latency_compensation_beats_executing_chunks_late():
    results = compare_blending(0)
    assert results["latest"]["rms_error_rad"] < 0.5 * results["latest_uncompensated"][
        "rms_error_rad"]


def test_synthetic_stream_shape_and_latency():
    stream = SyntheticStream(duration_s=2.0)
    chunks = synthetic_chunks(0, stream, PdTrackerConfig().joint_names, "gripper_joint")
    assert len(chunks) == 20
    for arrival, ch in chunks:
        assert 0.05 <= arrival - ch.stamp_s <= 0.15
        assert len(ch.positions) == 16 and len(ch.positions[0]) == 7
    assert [a for a, _ in chunks] == sorted(a for a, _ in chunks)
