"""dpr bench lift-path: both solves timed, and the batched one as accurate as the reference."""

from diffusion_policy_ros.bench.lift_path import run


def test_row():
    row = run(repeats=2, poses=5)
    assert row["points"] == 16 and abs(row["rise_m"] - 0.15) < 1e-9
    assert row["batched_ms_p50"] > 0 and row["point_by_point_ms_p50"] > 0
    assert row["batched_solved"] >= row["point_by_point_solved"] > 0
    assert row["batched_error_max"] <= 1e-5 and row["max_joint_diff_rad"] < 0.01
