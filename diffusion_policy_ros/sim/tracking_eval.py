"""The PD tracker in closed loop on the simulated arm, with late and jittered chunks.

The scripted expert plans a chunk every control period from the state at that
instant (stamp = that instant), and the chunk reaches the tracker
``latency_s ~ U(latency_min_s, latency_max_s)`` later, as a policy's chunks do
over ROS (inference + transport). Physics and tracker advance in 2 ms steps
meanwhile, so chunks arrive late, sometimes out of order (the tracker rejects
those as ``not_newer``), and the tracker must compensate. ``run_episode`` runs
one such episode and reports grasp success, RMS / max joint tracking error
(reference vs measured), and the reference jerk within 20 ms of a chunk being
accepted (p95 over switches and the maximum; the reference's acceleration is
bounded, its jerk is not, so the maximum is set by the limiter: 2 a_max / dt).

The comparison of the blend strategies over many seeded episodes (``dpr bench
tracking``) is ``bench.sim_tracking``; this module is the closed-loop harness it
and test/sim/test_tracking.py share.
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

from diffusion_policy_ros.control import ActionChunk
from diffusion_policy_ros.sim.expert import ScriptedExpert
from diffusion_policy_ros.sim.runtime import SimulationRuntime
from diffusion_policy_ros.sim.scene import JOINT_NAMES

SWITCH_WINDOW_S = 0.02


@dataclasses.dataclass
class TrackingResult:
    success: bool
    rms_error_rad: float
    max_error_rad: float
    peak_switch_jerk_rad_s3: float
    p95_switch_jerk_rad_s3: float
    chunks_accepted: int
    chunks_rejected: int


def run_episode(runtime: SimulationRuntime, expert: ScriptedExpert, seed: int,
                latency_min_s: float = 0.05, latency_max_s: float = 0.15,
                control_period_s: float = 0.1, stop_chunks_at_s: float | None = None,
                max_time_s: float | None = None) -> tuple[TrackingResult, dict[str, np.ndarray]]:
    """One episode (until done or ``max_time_s``); returns metrics and per-step traces.

    ``stop_chunks_at_s``: no chunk is planned from then on (a policy that died).
    """
    state = runtime.reset(seed)
    expert.reset(state.target)
    rng = np.random.default_rng([seed, 99])
    dt = runtime.scene.timestep_s
    period_steps = int(round(control_period_s / dt))
    times = [k * expert.config.dt_s for k in range(expert.config.horizon)]
    in_flight: list[tuple[float, int, ActionChunk]] = []
    t_log, q_log, ref_log, vel_log, accepted_at = [], [], [], [], []
    accepted = rejected = 0
    step = 0
    while not runtime.task_state.done and (max_time_s is None or runtime.time_s < max_time_s):
        now = runtime.time_s
        if step % period_steps == 0 and (stop_chunks_at_s is None or now < stop_chunks_at_s):
            chunk = ActionChunk(now, JOINT_NAMES, times, expert.act(runtime.scene).tolist())
            arrival = now + rng.uniform(latency_min_s, latency_max_s)
            heapq.heappush(in_flight, (arrival, step, chunk))
        while in_flight and in_flight[0][0] <= now + 1e-9:
            decision = runtime.submit_chunk(heapq.heappop(in_flight)[2])
            if decision.accepted:
                accepted += 1
                accepted_at.append(now)
            else:
                rejected += 1
        command = runtime.tracked_step()
        t_log.append(now)
        q_log.append(runtime.scene.joint_positions()[:6])
        ref_log.append(command.q_ref)
        vel_log.append(command.qd_ref)
        step += 1
    t = np.asarray(t_log)
    q, q_ref, qd_ref = np.asarray(q_log), np.asarray(ref_log), np.asarray(vel_log)
    error = np.abs(q_ref - q)
    jerk = np.abs(np.diff(qd_ref, n=2, axis=0)) / dt ** 2
    near = np.zeros(len(t) - 2, dtype=bool)
    for ta in accepted_at:
        near |= np.abs(t[1:-1] - ta) <= SWITCH_WINDOW_S
    result = TrackingResult(
        success=runtime.task_state.success,
        rms_error_rad=float(np.sqrt(np.mean(error ** 2))),
        max_error_rad=float(error.max()),
        peak_switch_jerk_rad_s3=float(jerk[near].max()) if near.any() else 0.0,
        p95_switch_jerk_rad_s3=float(np.percentile(jerk[near].max(axis=1), 95))
        if near.any() else 0.0,
        chunks_accepted=accepted, chunks_rejected=rejected)
    traces = {"t": t, "q": q, "q_ref": q_ref, "qd_ref": qd_ref,
              "qd_final": runtime.scene.joint_velocities()[:6]}
    return result, traces
