"""``dpr bench tick``: time ``PdTracker.tick`` and ``submit_chunk`` (no ROS).

``python -m diffusion_policy_ros.bench.tracker_tick`` runs it without the CLI.

Runs the tracker on the synthetic chunk stream of ``bench.blending`` (chunks
every 100 ms, so cross-fades are nearly always in progress) with an ideal
plant and reports the median and 99th percentile of the tick call alone.
``submit_chunk`` (10 Hz, builds splines) is timed separately.

The hot path uses plain Python floats and lists: measured, a 6-joint
``ReferenceLimiter.step`` and the PD law are several times faster with floats
than written with small numpy arrays (per-call overhead dominates at this
size). A whole tick stays well inside the 200 us budget (figures: docs/explanation/benchmarks.md,
``dpr bench tick`` and "Measurements behind the code's design").
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from diffusion_policy_ros.bench.blending import SyntheticStream, synthetic_chunks
from diffusion_policy_ros.control.pd_tracker import PdTracker
from diffusion_policy_ros.control.tracker_config import PdTrackerConfig


def benchmark_tick(duration_s: float = 10.0, config: PdTrackerConfig | None = None,
                   seed: int = 0, verbose: bool = True) -> dict[str, float]:
    """Median / p99 time of ``tick`` and ``submit_chunk`` in microseconds."""
    config = config or PdTrackerConfig()
    stream = SyntheticStream(duration_s=duration_s, rate_hz=config.rate_hz)
    chunks = synthetic_chunks(seed, stream, config.joint_names, config.gripper_joint)
    tracker = PdTracker(config)
    h = 1.0 / config.rate_hz
    n = int(duration_s / h)
    q = [0.0] * config.num_joints
    qd = [0.0] * config.num_joints
    tick_ns = np.empty(n)
    submit_ns = []
    clock = time.perf_counter_ns
    c = 0
    for i in range(n):
        now = i * h
        while c < len(chunks) and chunks[c][0] <= now:
            t0 = clock()
            tracker.submit_chunk(chunks[c][1], now)
            submit_ns.append(clock() - t0)
            c += 1
        t0 = clock()
        cmd = tracker.tick(now, q, qd, now)
        tick_ns[i] = clock() - t0
        q = list(cmd.q_ref)
        qd = list(cmd.qd_ref)
    ticks = tick_ns[n // 10:] / 1000.0
    submits = np.asarray(submit_ns) / 1000.0
    result = {
        "tick_median_us": float(np.median(ticks)),
        "tick_p99_us": float(np.percentile(ticks, 99)),
        "tick_max_us": float(ticks.max()),
        "submit_median_us": float(np.median(submits)),
        "submit_p99_us": float(np.percentile(submits, 99)),
        "ticks": len(ticks),
    }
    if verbose:
        print(f"blend_strategy={config.blend_strategy} rate_hz={config.rate_hz:g}: "
              f"tick median {result['tick_median_us']:.1f} us, p99 {result['tick_p99_us']:.1f} "
              f"us, max {result['tick_max_us']:.1f} us over {result['ticks']} ticks; "
              f"submit_chunk median {result['submit_median_us']:.1f} us, "
              f"p99 {result['submit_p99_us']:.1f} us")
    return result


def main() -> None:
    base = PdTrackerConfig()
    for strategy in ("latest", "crossfade", "ensemble"):
        benchmark_tick(config=dataclasses.replace(base, blend_strategy=strategy))


if __name__ == "__main__":
    main()
