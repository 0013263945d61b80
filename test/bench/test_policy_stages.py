"""dpr bench policy: ``benchmark_policy`` reports every stage for every policy and step
count."""

from diffusion_policy_ros.bench.policy_stages import STAGES, benchmark_policy, format_table


def test_rows_and_table(make_config, language):
    configs = {"unet": make_config(target_grounding=True, grounding_dim=8,
                                   tool_relative_target=True, tool_target_bands=2),
               "dit": make_config(denoiser="dit")}
    rows = benchmark_policy(configs, steps=(4, 2), repeats=2, language=language,
                            num_samples=(1, 3))
    timed = [r for r in rows if r["ddim_steps"] is not None]
    assert {(r["policy"], r["ddim_steps"], r["num_samples"], r["stage"]) for r in timed} == {
        (p, n, k, s) for p in configs for n in (4, 2) for k in (1, 3) for s in STAGES
        if s not in ("grounding", "tool_target") or p == "unet"}  # listed only where it ran
    steps = {(r["policy"], r["ddim_steps"]): r["samples"] for r in timed
             if r["stage"] == "denoiser_step" and r["num_samples"] == 3}
    assert steps == {("unet", 4): 8, ("unet", 2): 4, ("dit", 4): 8, ("dit", 2): 4}
    assert all(0 < r["median_ms"] <= r["p99_ms"] for r in rows)
    assert rows[-1]["stage"] == "language_miss"
    table = format_table(rows)
    assert table.count("\n| unet |") == 4 and "denoiser_step" in table and "cache miss" in table
