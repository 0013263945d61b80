"""dpr bench aot: the pooling forms agree (the graph rows compile for minutes: not here)."""

from diffusion_policy_ros.bench.aot_graphs import pooling_row


def test_pooling_forms_give_the_same_numbers():
    row = pooling_row(repeats=3, compiled=False)
    assert row["max_abs_diff"] == 0.0 and row["shipped"] == "masked"
    assert row["baseline_ms"] > 0 and row["candidate_ms"] > 0
