"""dpr bench policy: ``benchmark_policy`` reports every stage for every policy and step
count."""

import json

import yaml

from diffusion_policy_ros.bench.policy_stages import (
    INSTRUCTION,
    STAGES,
    benchmark_policy,
    format_table,
    main,
)


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


def test_a_language_cache_replaces_the_sentence_model(language, tmp_path, capsys):
    """--language-cache: embeddings from LanguageEmbedder's JSON, no cache-miss row (a host
    without the sentence model, such as an accelerator machine)."""
    language.embed(INSTRUCTION)  # the fixture's embedder writes its cache file
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "image_size": [32, 32], "image_crop_size": [28, 28], "num_points": 64,
        "image_base_channels": 8, "image_stages": 2, "image_token_grid": 2, "norm_groups": 4,
        "point_feature_dim": 32, "point_tokens": 4, "fusion_dim": 32, "fusion_heads": 2,
        "cond_dim": 32, "timestep_embed_dim": 16, "unet_base_dim": 16, "unet_levels": 2,
        "unet_kernel_size": 3}))
    out = tmp_path / "rows.json"
    main(["--config", str(config), "--steps", "2", "--samples", "1", "--repeats", "2",
          "--language-cache", str(language.cache_path), "--json", str(out)])
    assert "cache miss" not in capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert rows and all(r["stage"] != "language_miss" for r in rows)
