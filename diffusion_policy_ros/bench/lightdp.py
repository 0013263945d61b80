"""``dpr bench lightdp``: one table of the real-time candidates.

Each row is a checkpoint with a step count, K (chunks per observation, medoid) and a
runtime backend (``config/bench_lightdp.yaml``). Latency is the whole chunk as
``policy_node`` computes it (``PolicyRunner.predict``: observation in, 16 x 7 chunk
out, one new frame encoded and one taken from the cache, as at run time), measured
with 1 and 2 torch / ONNX Runtime threads, rows interleaved chunk by chunk so that
machine noise falls on all of them alike; median and p99 per row, and the ratio of
each median to the reference row's at the same thread count. Success and wrong-object
rates come from the ``dpr eval --report`` files each row names (a row without one
shows "-"); the command that produced each is in the YAML beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from diffusion_policy_ros.bench.json_report import write_json
from diffusion_policy_ros.config import CONFIG_DIR, DATA_DIR
from diffusion_policy_ros.policy.export import MANIFESTS
from diffusion_policy_ros.policy.language import LanguageEmbedder
from diffusion_policy_ros.policy.runner import (
    GRAPH_SUBDIRS,
    PolicyRunner,
    default_graph_dir,
    synthetic_observation,
)

INSTRUCTION = "pick up the red cube"
EVAL_KINDS = ("task", "switch", "depth_noise", "wrong")


@dataclasses.dataclass
class BenchRow:
    label: str
    checkpoint: str
    steps: int | None = None
    samples: int | None = None
    backend: str = "torch"
    precision: str = "fp32"
    """fp32 | bf16 | fp16 (torch autocast; the ONNX graphs are fp32)."""
    reference: bool = False
    evals: dict = dataclasses.field(default_factory=dict)
    """{task | switch | depth_noise | wrong: dpr eval --report JSON, or a list of reports
    of consecutive seed ranges, summed}."""


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else DATA_DIR / p


def load_rows(path: str | Path = CONFIG_DIR / "bench_lightdp.yaml") -> list[BenchRow]:
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    rows = [BenchRow(**{k: v for k, v in row.items() if k != "command"})
            for row in doc.get("rows", [])]
    if sum(r.reference for r in rows) != 1:
        raise ValueError(f"{path}: exactly one row must be the reference")
    return rows


def _check_report_policy(row: BenchRow, path: Path, summary: dict) -> None:
    """A report that says which policy it ran (``dpr eval`` since 2026-12-05) must have run
    this row's checkpoint (its last two path parts), backend, precision, steps and K: a
    report filed under the wrong row fails."""
    ran = summary.get("policy")
    if ran is None:
        return
    expected = {"checkpoint": Path(row.checkpoint).parts[-2:], "backend": row.backend,
                "precision": row.precision, "num_inference_steps": row.steps,
                "num_samples": row.samples}
    ran = {**ran, "checkpoint": Path(ran.get("checkpoint", "")).parts[-2:]}
    wrong = {k: (ran.get(k), v) for k, v in expected.items()
             if v is not None and ran.get(k) != v}
    if wrong:
        raise ValueError(f"{path} is not row '{row.label}''s evaluation: "
                         + ", ".join(f"{k} {got} != {want}" for k, (got, want) in wrong.items()))


def eval_figures(row: BenchRow) -> dict[str, dict]:
    """{kind: {episodes, success_rate, wrong_object_rate, grasp_retry}} over the row's dpr
    eval reports of that kind (all of them must exist); grasp_retry: every report ran with
    policy_node's grasp retry (reports before 2026-12-04 ran without)."""
    out = {}
    for kind, reports in row.evals.items():
        paths = [_resolve(r) for r in ([reports] if isinstance(reports, str) else reports)]
        if not paths or not all(p.exists() for p in paths):
            continue
        summaries = [json.loads(p.read_text(encoding="utf-8"))["summary"] for p in paths]
        for path, summary in zip(paths, summaries, strict=True):
            _check_report_policy(row, path, summary)
        episodes = sum(s["episodes"] for s in summaries)
        out[kind] = {"episodes": episodes, **{
            rate: sum(s[rate] * s["episodes"] for s in summaries) / episodes
            for rate in ("success_rate", "wrong_object_rate")},
            "grasp_retry": all(s.get("grasp_retry", False) for s in summaries)}
    return out


def measure(rows: Sequence[BenchRow], chunks: int = 50, threads: Sequence[int] = (1, 2),
            seed: int = 0, progress: bool = True) -> list[dict]:
    """Chunk latency of every (row, thread count), interleaved chunk by chunk."""
    language = LanguageEmbedder()
    runners = {}
    for row in rows:
        for n in threads:
            runner = PolicyRunner.from_checkpoint(
                _resolve(row.checkpoint), device="cpu", language=language,
                num_inference_steps=row.steps, num_samples=row.samples, num_threads=n,
                backend=row.backend, precision=row.precision)
            runner.warmup(INSTRUCTION)
            runners[(row.label, n)] = runner
    first = next(iter(runners.values()))
    rng = np.random.default_rng(seed)
    frames = [synthetic_observation(first.policy, rng) for _ in range(chunks + 1)]
    durations: dict[tuple, list[float]] = {key: [] for key in runners}
    order = list(runners)
    for i in range(chunks):
        history = frames[i:i + 2]
        # Rotate the order so no configuration always runs right after another.
        for key in order[i % len(order):] + order[:i % len(order)]:
            torch.set_num_threads(key[1])
            t0 = time.perf_counter()
            runners[key].predict(history, INSTRUCTION, noise=i)
            durations[key].append(time.perf_counter() - t0)
        if progress and (i + 1) % 10 == 0:
            print(f"  {i + 1}/{chunks} chunks per configuration", flush=True)
    results: list[dict[str, Any]] = []
    for row in rows:
        for n in threads:
            runner = runners[(row.label, n)]
            ms = 1e3 * np.asarray(durations[(row.label, n)])
            results.append({
                "label": row.label, "backend": row.backend, "precision": row.precision,
                "threads": n,
                "sampler": runner.config.sampler, "steps": runner.num_inference_steps,
                "samples": runner.num_samples, "reference": row.reference,
                "parameters": runner.policy.parameter_counts()["total"],
                "denoiser_parameters": runner.policy.parameter_counts()["denoiser"],
                "median_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99)),
                "chunks": int(ms.size), "evals": eval_figures(row)})
    for r in results:
        ref = next(x for x in results if x["reference"] and x["threads"] == r["threads"])
        r["speedup"] = ref["median_ms"] / r["median_ms"]
    return results


def _rate(evals: dict, kind: str, wrong: bool = False) -> str:
    s = evals.get(kind)
    if s is None:
        return "-"
    n = s["episodes"]
    mark = "" if s.get("grasp_retry", True) else " *"
    if wrong:
        return f"{s['wrong_object_rate']:.2f}{mark}"
    return f"{round(s['success_rate'] * n)}/{n}{mark}"


def format_table(results: list[dict], machine: str) -> str:
    lines = [f"Chunk latency (observation in, 16 x 7 chunk out) on {machine}; median / p99 "
             f"over {results[0]['chunks']} chunks per row, rows interleaved; speed-up = "
             "reference median / row median at the same thread count. Success: named object "
             "lifted in process (`dpr eval`), task = seeds 5000-5099, switch = 5000-5039 "
             "(instruction changed after 1 s), depth noise = 5000-5049 with the Kinect's "
             "time-of-flight noise, wrong = lifted another object (task run); with "
             "policy_node's grasp retry, except where marked * (without: reports from "
             "before 2026-12-04).", "",
             "| configuration | backend, precision | params (denoiser) | sampler x steps | K "
             "| 1 thread ms | speed-up | 2 threads ms | speed-up | task | wrong | switch "
             "| depth noise |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    by_label: dict[str, dict[int, dict]] = {}
    for r in results:
        by_label.setdefault(r["label"], {})[r["threads"]] = r
    for label, per in by_label.items():
        r = next(iter(per.values()))

        def cell(n: int, per=per) -> str:
            x = per.get(n)
            return (f"{x['median_ms']:.1f} / {x['p99_ms']:.1f} | {x['speedup']:.1f}x"
                    if x else "- | -")

        name = f"**{label}** (reference)" if r["reference"] else label
        lines.append(
            f"| {name} | {r['backend']}, {r.get('precision', 'fp32')} | "
            f"{r['parameters'] / 1e6:.2f} M "
            f"({r['denoiser_parameters'] / 1e6:.2f} M) | {r['sampler']} x {r['steps']} | "
            f"{r['samples']} | {cell(1)} | {cell(2)} | {_rate(r['evals'], 'task')} | "
            f"{_rate(r['evals'], 'task', wrong=True)} | {_rate(r['evals'], 'switch')} | "
            f"{_rate(r['evals'], 'depth_noise')} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dpr bench lightdp", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=str(CONFIG_DIR / "bench_lightdp.yaml"))
    parser.add_argument("--only", nargs="+", help="labels to run (default: every row)")
    parser.add_argument("--chunks", type=int, default=50, help="chunks per row and thread "
                        "count (at least 50 for the published table)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default="build/bench_lightdp",
                        help="directory for lightdp.md and lightdp.json")
    args = parser.parse_args(argv)
    rows = load_rows(args.rows)
    if args.only:
        rows = [r for r in rows if r.label in args.only or r.reference]
    missing = [r.label for r in rows if not (_resolve(r.checkpoint) / "config.json").exists()]
    if missing:
        print(f"dpr bench lightdp: no checkpoint for {', '.join(missing)} (the YAML says how "
              "to make each)", flush=True)
        rows = [r for r in rows if r.label not in missing]
    unexported = [r.label for r in rows if r.backend in GRAPH_SUBDIRS and not all(
        (default_graph_dir(_resolve(r.checkpoint), r.backend, n) / MANIFESTS[r.backend]
         ).exists() for n in args.threads)]
    if unexported:
        print(f"dpr bench lightdp: skipping {', '.join(unexported)}: no exported graphs for "
              f"each of --threads {' '.join(map(str, args.threads))} (dpr export --checkpoint "
              "CKPT [--format aotinductor --threads N] writes them)", flush=True)
        rows = [r for r in rows if r.label not in unexported]
    results = measure(rows, args.chunks, args.threads)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    table = format_table(results, machine)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lightdp.md").write_text(table + "\n", encoding="utf-8")
    write_json(out / "lightdp.json", results)
    print(f"\nwritten: {out / 'lightdp.md'}, {out / 'lightdp.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
