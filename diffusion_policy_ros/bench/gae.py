"""``dpr bench gae``: GAE over a whole rollout at once vs the reverse Python loop.

The seed document fuses GAE into one kernel; here the same idea is one batched matrix
product (``ppo.gae_advantages``). Prints, per rollout size, the median time of each
over interleaved repeats, the speed-up and the largest difference between the two.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
import torch

from diffusion_policy_ros.bench.json_report import write_json
from diffusion_policy_ros.learning.ppo import gae_advantages, gae_advantages_loop


def rollout(steps: int, envs: int, seed: int = 0, episode_steps: int = 60):
    """Random rewards and values with episode ends about every ``episode_steps`` steps."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(steps, envs, generator=g)
    values = torch.randn(steps, envs, generator=g)
    dones = (torch.rand(steps, envs, generator=g) < 1.0 / episode_steps).float()
    return rewards, values, dones, torch.randn(envs, generator=g)


def run(sizes: Sequence[tuple[int, int]], repeats: int) -> list[dict]:
    rows = []
    for steps, envs in sizes:
        args = (*rollout(steps, envs), 0.99, 0.95)
        times: dict[str, list[float]] = {"vectorised": [], "loop": []}
        for _ in range(repeats):  # interleaved, so drifting machine load hits both
            for name, fn in (("vectorised", gae_advantages), ("loop", gae_advantages_loop)):
                t0 = time.perf_counter()
                fn(*args)
                times[name].append(time.perf_counter() - t0)
        diff = float((gae_advantages(*args)[0] - gae_advantages_loop(*args)[0]).abs().max())
        vec, loop = (float(np.median(times[k])) * 1e3 for k in ("vectorised", "loop"))
        rows.append({"steps": steps, "envs": envs, "vectorised_ms_p50": vec,
                     "loop_ms_p50": loop, "speedup": loop / vec, "max_abs_diff": diff})
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["128x2", "256x8", "1024x8"],
                        help="rollouts as STEPSxENVS")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = []
    for s in args.sizes:
        steps, envs = (int(x) for x in s.split("x"))
        sizes.append((steps, envs))
    rows = run(sizes, args.repeats)
    print(f"GAE (gamma 0.99, lambda 0.95), median of {args.repeats}, {args.threads} thread(s)")
    print(f"{'steps x envs':>13} {'vectorised ms':>14} {'loop ms':>9} {'speed-up':>9} "
          f"{'max |diff|':>11}")
    for r in rows:
        print(f"{r['steps']:>6} x {r['envs']:<4} {r['vectorised_ms_p50']:>14.3f} "
              f"{r['loop_ms_p50']:>9.3f} {r['speedup']:>8.1f}x {r['max_abs_diff']:>11.1e}")
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
