"""Timing of the simulation core: camera frames and physics steps (medians).

``python -m diffusion_policy_ros.bench.sim_core`` prints the numbers (no ``dpr bench``
subcommand); ``run_benchmark`` returns them for scripts or CI trend tracking. What
matters for a closed loop in real time: one 500 Hz tracker period is one physics
step, and the camera runs at 30 Hz, so per second ``500 * step + 30 * frame`` must
stay well under one core. A frame's CPU (``*_cpu_s``: this process's CPU time, the
software renderer's worker threads included) says more about that than its wall time.
"""

from __future__ import annotations

import time

import numpy as np

from diffusion_policy_ros.sim.camera import (
    DEFAULT_RESOLUTION,
    FINE_RESOLUTION,
    HD_RESOLUTION,
    KinectCamera,
)
from diffusion_policy_ros.sim.scene import ArmScene


def _median_s(fn, repeats: int, clock=time.perf_counter) -> float:
    fn()  # warm up (GL uploads, caches)
    samples = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return float(np.median(samples))


def run_benchmark(frames: int = 60, step_blocks: int = 50, steps_per_block: int = 100,
                  resolutions=(DEFAULT_RESOLUTION, FINE_RESOLUTION, HD_RESOLUTION),
                  seed: int = 0) -> dict:
    """Median seconds per frame / step; keys name what was timed."""
    scene = ArmScene()
    scene.reset(seed=seed)
    out: dict[str, float] = {}
    for width, height in resolutions:
        with KinectCamera(scene.model, width, height) as cam:
            out[f"render_rgbd_{width}x{height}_s"] = _median_s(
                lambda cam=cam: cam.render(scene.data), frames)
            out[f"render_arrays_{width}x{height}_s"] = _median_s(
                lambda cam=cam: cam.render_arrays(scene.data), frames)
            out[f"render_rgbd_{width}x{height}_cpu_s"] = _median_s(
                lambda cam=cam: cam.render(scene.data), frames, time.process_time)
    hold = np.zeros(6)

    def block():
        for _ in range(steps_per_block):
            scene.step(hold, 0.085)

    out["physics_step_s"] = _median_s(block, step_blocks) / steps_per_block
    out["physics_steps_per_second"] = 1.0 / out["physics_step_s"]
    out["realtime_factor"] = scene.timestep_s / out["physics_step_s"]
    return out


def main() -> None:
    results = run_benchmark()
    for key, value in results.items():
        if key.endswith("_s"):
            print(f"{key:32s} {value * 1e3:9.3f} ms")
        else:
            print(f"{key:32s} {value:9.1f}")


if __name__ == "__main__":
    main()
