"""``dpr bench aot``: how the AOTInductor packages of ``dpr export`` are compiled.

Two choices in the packages, each timed against its alternative on this CPU (one
thread by default, as ``policy_node`` runs; median of interleaved calls):

- the PointNet's per-cell max-pool (1 x 1024 points x 256 features, 8 cells), as one
  ``scatter_reduce(amax)`` (the training path, ``pointnet.cell_max``) or as 8 masked
  max-pools (``pointnet.masked_cell_max``, what a static graph records), both compiled
  by Inductor;
- each of the shipped policy's three graphs compiled with Inductor's freezing alone
  and with its GEMMs autotuned as well (``export.AOT_INDUCTOR_CONFIGS`` picks per graph).

Compiling every graph twice takes a few minutes; ``--graphs`` picks fewer.
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from diffusion_policy_ros.bench.json_report import write_json
from diffusion_policy_ros.config import SHIPPED_CHECKPOINT
from diffusion_policy_ros.policy import pointnet
from diffusion_policy_ros.policy.export import (
    AOT_CHUNK_PACKAGE,
    AOT_CLOUD_PACKAGE,
    AOT_FROZEN,
    AOT_FROZEN_AUTOTUNED,
    AOT_IMAGE_PACKAGE,
    AOT_INDUCTOR_CONFIGS,
    ExportGraphs,
    compile_aot_package,
)

GRAPHS = {"image": AOT_IMAGE_PACKAGE, "cloud": AOT_CLOUD_PACKAGE, "chunk": AOT_CHUNK_PACKAGE}


def interleaved_ms(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median ms of each call, the calls taking turns so that drifting load hits all."""
    for call in calls.values():
        for _ in range(10):
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(t)) * 1e3 for name, t in times.items()}


def _outputs(result) -> list[torch.Tensor]:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _max_difference(a, b) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(_outputs(a), _outputs(b),
                                                           strict=True))


def pooling_row(repeats: int, cells: int = 8, compiled: bool = True) -> dict:
    """Both pooling forms timed, Inductor-compiled (``compiled``) or eager."""
    g = torch.Generator().manual_seed(0)
    features = torch.rand((1, 1024, 256), generator=g)
    cell = torch.randint(0, cells, (1, 1024), generator=g)
    forms = {"scatter_reduce": pointnet.cell_max, "masked": pointnet.masked_cell_max}
    with torch.inference_mode():
        if compiled:
            forms = {name: torch.compile(fn, dynamic=False) for name, fn in forms.items()}
        results = {name: fn(features, cell, cells) for name, fn in forms.items()}
        ms = interleaved_ms({name: functools.partial(fn, features, cell, cells)
                             for name, fn in forms.items()}, repeats)
    mode = "Inductor" if compiled else "eager"
    return {"what": f"PointNet cell max-pool 1x1024x256, 8 cells ({mode})",
            "baseline": "scatter_reduce", "baseline_ms": ms["scatter_reduce"],
            "candidate": "masked", "candidate_ms": ms["masked"],
            "speedup": ms["scatter_reduce"] / ms["masked"],
            "max_abs_diff": _max_difference(results["scatter_reduce"], results["masked"]),
            "shipped": "masked"}


def graph_rows(checkpoint: str, graphs: Sequence[str], repeats: int) -> list[dict]:
    from diffusion_policy_ros.policy.checkpoint import load_checkpoint

    policy, _ = load_checkpoint(checkpoint)
    g = ExportGraphs.of(policy, None, None)
    modules = {"image": (g.image_encoder, g.image_args), "cloud": (g.cloud_encoder, g.cloud_args),
               "chunk": (g.head, g.chunk_args)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        for name in graphs:
            module, args = modules[name]
            program = torch.export.export(module, args)
            packages = {}
            for label, options in (("freezing", AOT_FROZEN), ("autotuned", AOT_FROZEN_AUTOTUNED)):
                path = Path(tmp) / f"{name}_{label}.pt2"
                compile_aot_package(program, path, options)
                packages[label] = torch._inductor.aoti_load_package(str(path))
            ms = interleaved_ms({label: functools.partial(p, *args)
                                 for label, p in packages.items()}, repeats)
            rows.append({"what": f"{name} graph ({GRAPHS[name]})",
                         "baseline": "freezing", "baseline_ms": ms["freezing"],
                         "candidate": "freezing + GEMM autotune", "candidate_ms": ms["autotuned"],
                         "speedup": ms["freezing"] / ms["autotuned"],
                         "max_abs_diff": _max_difference(packages["freezing"](*args),
                                                         packages["autotuned"](*args)),
                         "shipped": "freezing + GEMM autotune"
                         if AOT_INDUCTOR_CONFIGS[GRAPHS[name]] == AOT_FROZEN_AUTOTUNED
                         else "freezing"})
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(SHIPPED_CHECKPOINT))
    parser.add_argument("--graphs", nargs="*", default=list(GRAPHS), choices=list(GRAPHS))
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (policy_node's num_threads)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [pooling_row(args.repeats), *graph_rows(args.checkpoint, args.graphs, args.repeats)]
    print(f"AOTInductor choices, median ms of {args.repeats} interleaved calls, "
          f"{args.threads} thread(s)\n")
    print("| what | baseline | ms | candidate | ms | speed-up | max abs diff | shipped |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['what']} | {r['baseline']} | {r['baseline_ms']:.3f} | {r['candidate']} | "
              f"{r['candidate_ms']:.3f} | {r['speedup']:.2f}x | {r['max_abs_diff']:.1e} | "
              f"{r['shipped']} |")
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
