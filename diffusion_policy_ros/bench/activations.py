"""``dpr bench activations``: the policy's one-exp Mish against torch's, eager and compiled.

Shapes are where the shipped policy applies Mish: the grounding's per-point layers
(1 x 1024 x 64, twice per camera frame) and a U-Net block of the chunk head
(K = 8 samples x 64 channels x 16 steps). Prints the median time of each form over
interleaved repeats, the speed-up and the largest difference to float64 Mish.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
import torch

from diffusion_policy_ros.bench.json_report import write_json
from diffusion_policy_ros.policy.activations import mish

SHAPES = {"grounding 1x1024x64": (1, 1024, 64), "unet block 8x64x16": (8, 64, 16)}


def _torch_mish(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mish(x)


def run(repeats: int, compiled: bool) -> list[dict]:
    forms = {"torch": _torch_mish, "one_exp": mish}
    modes = {"eager": forms}
    if compiled:
        modes["inductor"] = {name: torch.compile(fn, dynamic=False) for name, fn in forms.items()}
    rows = []
    for label, shape in SHAPES.items():
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
        exact = torch.nn.functional.mish(x.double())
        for mode, fns in modes.items():
            times: dict[str, list[float]] = {name: [] for name in fns}
            with torch.inference_mode():
                for fn in fns.values():  # warm-up (and compile)
                    fn(x)
                for _ in range(repeats):  # interleaved, so drifting machine load hits both
                    for name, fn in fns.items():
                        t0 = time.perf_counter()
                        fn(x)
                        times[name].append(time.perf_counter() - t0)
                diffs = {name: float((fn(x).double() - exact).abs().max())
                         for name, fn in fns.items()}
            ref, new = (float(np.median(times[k])) * 1e6 for k in ("torch", "one_exp"))
            rows.append({"shape": label, "mode": mode, "torch_us_p50": ref,
                         "one_exp_us_p50": new, "speedup": ref / new,
                         "torch_max_abs_err": diffs["torch"],
                         "one_exp_max_abs_err": diffs["one_exp"]})
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-compile", action="store_true",
                        help="eager only (Inductor needs a C++ compiler and ~30 s)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = run(args.repeats, compiled=not args.no_compile)
    print(f"Mish, median of {args.repeats} interleaved calls, {args.threads} thread(s); "
          f"error = max |y - float64 Mish|")
    print(f"{'shape':>22} {'mode':>9} {'torch us':>9} {'one-exp us':>11} {'speed-up':>9} "
          f"{'torch err':>10} {'one-exp err':>12}")
    for r in rows:
        print(f"{r['shape']:>22} {r['mode']:>9} {r['torch_us_p50']:>9.1f} "
              f"{r['one_exp_us_p50']:>11.1f} {r['speedup']:>8.1f}x "
              f"{r['torch_max_abs_err']:>10.1e} {r['one_exp_max_abs_err']:>12.1e}")
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
