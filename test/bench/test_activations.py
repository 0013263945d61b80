"""dpr bench activations: both Mish forms timed per shape, with their errors."""

from diffusion_policy_ros.bench.activations import SHAPES, run


def test_rows():
    rows = run(repeats=3, compiled=False)
    assert [r["shape"] for r in rows] == list(SHAPES)
    for r in rows:
        assert r["mode"] == "eager" and r["torch_us_p50"] > 0 and r["one_exp_us_p50"] > 0
        assert r["one_exp_max_abs_err"] < 1e-5 and r["torch_max_abs_err"] < 1e-5
