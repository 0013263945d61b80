"""``dpr bench tracking``: the blend strategies in closed loop on the simulated arm.

The scripted expert's chunks reach the PD tracker 50-150 ms late (uniform jitter)
while physics runs (``sim.tracking_eval.run_episode``, one episode). For each blend
strategy, over the same seeded episodes: success rate, mean RMS and max joint
tracking error, jerk of the reference within 20 ms of an accepted chunk (p95 and
max) and the share of chunks rejected.

``python -m diffusion_policy_ros.bench.sim_tracking`` runs it without the CLI.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from diffusion_policy_ros.control.tracker_config import BLEND_STRATEGIES
from diffusion_policy_ros.sim.expert import ExpertConfig, ScriptedExpert
from diffusion_policy_ros.sim.runtime import SimulationRuntime, load_tracker_config
from diffusion_policy_ros.sim.sim_config import SimConfig
from diffusion_policy_ros.sim.tracking_eval import run_episode


def compare(episodes: int = 20, seed: int = 0, latency_min_s: float = 0.05,
            latency_max_s: float = 0.15) -> dict[str, dict[str, float]]:
    """Mean metrics per blend strategy over the same seeded episodes."""
    base = load_tracker_config()
    config = dataclasses.replace(SimConfig(), render_observations=False)
    out = {}
    for strategy in BLEND_STRATEGIES:
        runtime = SimulationRuntime(config, dataclasses.replace(base, blend_strategy=strategy),
                                    with_camera=False)
        expert = ScriptedExpert(runtime.scene.model, ExpertConfig())
        results = [run_episode(runtime, expert, seed + i, latency_min_s, latency_max_s)[0]
                   for i in range(episodes)]
        runtime.close()
        out[strategy] = {
            "success_rate": float(np.mean([r.success for r in results])),
            "rms_error_rad": float(np.mean([r.rms_error_rad for r in results])),
            "max_error_rad": float(np.max([r.max_error_rad for r in results])),
            "peak_switch_jerk_rad_s3": float(np.max([r.peak_switch_jerk_rad_s3
                                                     for r in results])),
            "p95_switch_jerk_rad_s3": float(np.mean([r.p95_switch_jerk_rad_s3
                                                     for r in results])),
            "rejected_share": float(np.sum([r.chunks_rejected for r in results])
                                    / np.sum([r.chunks_accepted + r.chunks_rejected
                                              for r in results])),
        }
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency-min-s", type=float, default=0.05)
    parser.add_argument("--latency-max-s", type=float, default=0.15)
    args = parser.parse_args(argv)
    results = compare(args.episodes, args.seed, args.latency_min_s, args.latency_max_s)
    print(f"{args.episodes} expert episodes per strategy, chunks every 0.1 s arriving "
          f"{args.latency_min_s * 1e3:.0f}-{args.latency_max_s * 1e3:.0f} ms late")
    print("| blend | success | RMS error (rad) | max error (rad) | jerk at switches p95 / max "
          "(rad/s^3) | chunks rejected |")
    print("|---|---|---|---|---|---|")
    for name, m in results.items():
        print(f"| {name} | {m['success_rate']:.2f} | {m['rms_error_rad']:.4f} | "
              f"{m['max_error_rad']:.3f} | {m['p95_switch_jerk_rad_s3']:.0f} / "
              f"{m['peak_switch_jerk_rad_s3']:.0f} | "
              f"{m['rejected_share']:.1%} |")


if __name__ == "__main__":
    main()
