"""``dpr bench policy``: per-stage policy latency.

``python -m diffusion_policy_ros.bench.policy_stages`` runs it without the CLI.

Runs ``PolicyRunner.predict`` on random observations with untrained weights
(latency does not depend on the weights) for each policy config, DDIM step
count and number of sampled chunks per observation (the medoid of K, shipped
K = 8; one denoiser step then runs a batch of K), and reports the median and
99th percentile of every stage: RGB, point and proprioception encoders,
fusion, one denoiser step (network + DDIM update), the instruction lookup
(cache hit), and the full chunk (numpy in, numpy out). A cache miss (one
sentence-encoder call) is timed separately on fresh instructions.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from diffusion_policy_ros.bench.json_report import write_json
from diffusion_policy_ros.policy.configuration_diffusion import (
    DiffusionPolicyConfig,
    load_policy_config,
)
from diffusion_policy_ros.policy.language import LanguageEmbedder
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.runner import PolicyRunner, synthetic_observation

STAGES = ("rgb_encoder", "point_encoder", "grounding", "tool_target", "proprio_encoder",
          "language", "fusion", "denoiser_step", "sampler", "total")
INSTRUCTION = "pick up the red cube"


def default_configs() -> dict[str, DiffusionPolicyConfig]:
    return {"unet": load_policy_config("policy_unet"), "dit": load_policy_config("policy_dit")}


def _row(policy: str, params: int | None, steps: int | None, stage: str,
         samples_s: Sequence[float], num_samples: int | None = None) -> dict:
    ms = 1e3 * np.asarray(samples_s)
    return {"policy": policy, "parameters": params, "ddim_steps": steps,
            "num_samples": num_samples, "stage": stage,
            "median_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99)),
            "samples": int(ms.size)}


def benchmark_policy(configs: Mapping[str, DiffusionPolicyConfig] | None = None,
                     steps: Sequence[int] = (100, 10), repeats: int = 30, device: str = "cpu",
                     precision: str = "fp32", num_threads: int | None = None,
                     language: LanguageEmbedder | None = None, seed: int = 0,
                     num_samples: Sequence[int] = (1,), cache_misses: bool = True
                     ) -> list[dict]:
    """One row per (policy, DDIM steps, chunks sampled, stage), plus the language
    cache-miss row (``cache_misses``: it needs the sentence model)."""
    configs = configs if configs is not None else default_configs()
    language = language or LanguageEmbedder()
    rows = []
    rng = np.random.default_rng(seed)
    for name, config in configs.items():
        torch.manual_seed(seed)
        policy = DiffusionPolicy(config)
        if policy.kinematics is not None:
            from diffusion_policy_ros.sim.ik import arm_tool_chain

            policy.kinematics.set_chain(arm_tool_chain())
        params = policy.parameter_counts()["total"]
        runner = PolicyRunner(policy, device=device, precision=precision, language=language,
                              num_threads=num_threads)
        runner.warmup(INSTRUCTION)
        history = [synthetic_observation(policy, rng) for _ in range(config.n_obs_steps)]
        for n in steps:
            for k in num_samples:
                runner.num_inference_steps, runner.num_samples = n, k
                samples: dict[str, list[float]] = {s: [] for s in STAGES}
                for i in range(repeats):
                    # One new frame per chunk, as at run time (the others are cached).
                    history = [*history[1:], synthetic_observation(policy, rng)]
                    runner.predict(history, INSTRUCTION, noise=i)
                    for stage in STAGES:
                        samples[stage] += runner.timer.durations_s.get(stage, [])
                rows += [_row(name, params, n, stage, samples[stage], k) for stage in STAGES
                         if samples[stage]]
    if cache_misses:
        misses = []
        for i in range(max(3, repeats // 3)):
            t0 = time.perf_counter()
            language.embed(f"{INSTRUCTION} number {i} of run {seed}")
            misses.append(time.perf_counter() - t0)
        rows.append(_row(language.model_name, None, None, "language_miss", misses))
    return rows


def format_table(rows: list[dict]) -> str:
    """Markdown: one line per (policy, DDIM steps, K), ``median / p99`` ms per stage."""
    head = "| policy | params | DDIM steps | K | " + " | ".join(STAGES) + " |"
    lines = [head, "|" + "---|" * (4 + len(STAGES))]
    groups: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        if r["ddim_steps"] is not None:
            key = (r["policy"], r["parameters"], r["ddim_steps"], r["num_samples"])
            groups.setdefault(key, {})[r["stage"]] = r
    for (policy, params, steps, k), by_stage in groups.items():
        cells = [f"{by_stage[s]['median_ms']:.2f} / {by_stage[s]['p99_ms']:.2f}"
                 if s in by_stage else "-" for s in STAGES]
        lines.append(f"| {policy} | {params / 1e6:.2f} M | {steps} | {k} | "
                     + " | ".join(cells) + " |")
    for r in rows:
        if r["ddim_steps"] is None:
            lines.append(f"\n{r['policy']} cache miss (one encode): median {r['median_ms']:.1f} "
                         f"ms, p99 {r['p99_ms']:.1f} ms over {r['samples']} instructions")
    lines.append("\nms, median / p99; K = chunks sampled per observation (medoid of K); "
                 "denoiser_step = one network call on a batch of K + DDIM update; "
                 "total = numpy observations in, numpy chunk out")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", help="policy YAML (repeatable); default: "
                        "config/policy_unet.yaml and config/policy_dit.yaml")
    parser.add_argument("--steps", type=int, nargs="+", default=[100, 10])
    parser.add_argument("--samples", type=int, nargs="+", default=[1, 8],
                        help="chunks sampled per observation (K of the medoid; shipped 8)")
    parser.add_argument("--repeats", type=int, default=30, help="chunks per row")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    parser.add_argument("--threads", type=int, help="torch intra-op threads")
    parser.add_argument("--language-cache", metavar="JSON",
                        help=f"instruction embeddings saved by LanguageEmbedder, holding "
                        f"{INSTRUCTION!r}: for a host without the sentence model (the "
                        f"cache-miss row is then left out)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    configs = ({path: load_policy_config(path) for path in args.config} if args.config
               else None)
    rows = benchmark_policy(configs, steps=args.steps, repeats=args.repeats, device=args.device,
                            precision=args.precision, num_threads=args.threads,
                            num_samples=args.samples,
                            language=LanguageEmbedder(cache_path=args.language_cache),
                            cache_misses=args.language_cache is None)
    print(format_table(rows))
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
