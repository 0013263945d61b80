"""Rates and figures of a bring-up run, from episode records and the nodes' diagnostics.

Chunk latency is the receive time of ``policy/action_chunk`` minus its header stamp
(observation stamp to chunk arrival), over the measured episodes' chunks when there
are episodes, and the same latency hop by hop (``monitoring.LatencyStages``: frame,
sync, policy, delivery); ``policy_node``'s own predict time and the tracker's
``period_error_ms`` come from ``/diagnostics``. The policy's chunk rate is the measured
episodes' chunks counted by observation stamp over their scored sim time where the run
is on sim time, else ``policy_node``'s last diagnostics window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from diffusion_policy_ros.monitoring import LatencyStages

OUTCOMES = ("success", "wrong_object", "timeout")
RATE_OF = {"episodes": "stamped in the episodes, per sim second",
           "last_window": "its last diagnostics window"}


def percentiles(values, qs=(50, 99)) -> dict[str, float | None]:
    """{'p50': .., 'p99': .., 'max': .., 'count': n}; None where there are no values."""
    arr = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    out: dict[str, float | None] = {f"p{q}": (round(float(np.percentile(arr, q)), 3)
                                              if arr.size else None) for q in qs}
    out["max"] = round(float(arr.max()), 3) if arr.size else None
    out["count"] = int(arr.size)
    return out


def finite_or_none(value) -> float | None:
    """A diagnostics value (a string) as a finite float, else None."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def count_or_none(values: dict, key: str) -> int | None:
    """A diagnostics counter (a string) as an int, None where the node does not report it."""
    return int(values[key]) if key in values else None


def summarize(outcomes: list[dict], latencies_ms: list[float], diagnostics: dict[str, dict],
              tracker_p99_worst: float | None, stages_ms: Sequence[dict] = ()) -> dict:
    """Rates and figures of a run from per-episode outcomes, the chunks' latencies (and
    their ``LatencyStages`` where measured) and the last diagnostics."""
    n = len(outcomes)
    counts = {k: sum(o["status"] == k for o in outcomes) for k in OUTCOMES}
    policy = diagnostics.get("policy_node", {})
    tracker = diagnostics.get("pd_tracker_node", {})
    sim = diagnostics.get("sim_node", {})
    f = finite_or_none
    chunk_rate = episodes_chunk_rate(outcomes)
    return {
        "episodes_completed": n,
        "success_rate": counts["success"] / n if n else None,
        "wrong_object_rate": counts["wrong_object"] / n if n else None,
        "timeout_rate": counts["timeout"] / n if n else None,
        "outcome_counts": counts,
        "chunk_latency_ms": percentiles(latencies_ms),
        "chunk_latency_stages_ms": {stage: percentiles([s[stage] for s in stages_ms])
                                    for stage in LatencyStages.STAGES},
        "policy_predict_ms": {"p50": f(policy.get("predict_ms_p50")),
                              "p99": f(policy.get("predict_ms_p99"))},
        "policy_chunk_rate_hz": (chunk_rate if chunk_rate is not None
                                 else f(policy.get("chunk_rate_hz"))),
        "policy_chunk_rate_of": "episodes" if chunk_rate is not None else "last_window",
        "policy_chunk_rate_hz_last_window": f(policy.get("chunk_rate_hz")),
        "policy_chunks_total": count_or_none(policy, "chunks_total"),
        "policy_overrun_ticks": count_or_none(policy, "overrun_ticks"),
        "policy_grasp_retries": count_or_none(policy, "grasp_retries_total"),
        "policy_grasp_lifts": count_or_none(policy, "grasp_lifts_total"),
        "tracker_period_error_ms": {"p50": f(tracker.get("period_error_ms_p50")),
                                    "p99": f(tracker.get("period_error_ms_p99")),
                                    "max": f(tracker.get("period_error_ms_max")),
                                    "p99_worst": tracker_p99_worst},
        "tracker_loop_rate_hz": f(tracker.get("loop_rate_hz")),
        "tracker_tick_source": tracker.get("tick_source"),
        "tracker_safety": {k: int(tracker[k]) for k in ("late_state_ticks", "overspeed_stops",
                                                        "path_aborts", "faults")
                           if k in tracker},
        "sim_lockstep": sim.get("lockstep"),
        "sim_lockstep_timeouts": count_or_none(sim, "lockstep_timeouts"),
        "sim_lockstep_resends": count_or_none(sim, "lockstep_resends"),
        "sim_lockstep_wait_ms": {"p50": f(sim.get("lockstep_wait_ms_p50")),
                                 "p99": f(sim.get("lockstep_wait_ms_p99"))},
        "sim_real_time_factor": achieved_real_time_factor(outcomes,
                                                          f(sim.get("real_time_factor"))),
        "sim_real_time_factor_last_window": f(sim.get("real_time_factor")),
    }


def episodes_chunk_rate(outcomes: list[dict]) -> float | None:
    """Chunks per sim second over the measured episodes: those stamped inside each
    episode's scored span (``chunks_in_span``) over its ``elapsed_s``; None without such
    counts (no episodes, or the wall clock), where ``policy_node``'s figure for its last
    diagnostics window, which can straddle a reset, stands in."""
    counted = [o for o in outcomes if o.get("chunks_in_span") is not None and o.get("elapsed_s")]
    if not counted:
        return None
    return round(sum(o["chunks_in_span"] for o in counted)
                 / sum(o["elapsed_s"] for o in counted), 3)


def achieved_real_time_factor(outcomes: list[dict], last_window: float | None) -> float | None:
    """Sim seconds per wall second over the measured episodes (their sim duration over
    their wall duration); without timed episodes, the sim's own figure for its last
    diagnostics window, which after the last episode can cover a pause or a reset."""
    timed = [o for o in outcomes if o.get("wall_s") and o.get("elapsed_s") is not None]
    if not timed:
        return last_window
    return round(sum(o["elapsed_s"] for o in timed) / sum(o["wall_s"] for o in timed), 3)


def format_summary(summary: dict) -> str:
    def f(x, spec=".1f"):
        return "n/a" if x is None else format(x, spec)

    lat, pred = summary["chunk_latency_ms"], summary["policy_predict_ms"]
    jit = summary["tracker_period_error_ms"]
    lines = []
    n = summary["episodes_completed"]
    if summary.get("episodes_requested") is not None:
        c = summary["outcome_counts"]
        lines.append(f"episodes {n}/{summary['episodes_requested']}: success rate "
                     f"{f(summary['success_rate'], '.2f')} ({c['success']}), wrong-object rate "
                     f"{f(summary['wrong_object_rate'], '.2f')} ({c['wrong_object']}), timeouts "
                     f"{c['timeout']}")
    lines.append(f"chunks received {lat['count']} ({f(summary['policy_chunk_rate_hz'])} /s at "
                 f"the policy, {RATE_OF[summary['policy_chunk_rate_of']]}); "
                 f"observation stamp -> chunk received p50 {f(lat['p50'])} ms, "
                 f"p99 {f(lat['p99'])} ms; policy predict p50 {f(pred['p50'])} ms, p99 "
                 f"{f(pred['p99'])} ms; grasp retries "
                 f"{f(summary.get('policy_grasp_retries'), 'd')}, lifts "
                 f"{f(summary.get('policy_grasp_lifts'), 'd')}")
    stages = summary.get("chunk_latency_stages_ms") or {}
    if any(s["count"] for s in stages.values()):
        lines.append("stamp -> chunk by hop, p50 (ms): " + ", ".join(
            f"{stage} {f(s['p50'])}" for stage, s in stages.items())
            + " (frame: to the camera's camera_info; sync: to observation/points; policy: "
              "to the chunk published; delivery: to the chunk received)")
    if summary.get("tracker_tick_source") == "joint_states":
        wait = summary.get("sim_lockstep_wait_ms") or {}
        loop = (f"tracker ticks on joint_states, sim lockstep {summary.get('sim_lockstep')} "
                f"(waits for a command p50 {f(wait.get('p50'), '.3f')} ms, p99 "
                f"{f(wait.get('p99'), '.3f')} ms; asked again "
                f"{summary.get('sim_lockstep_resends', 'n/a')}, timeouts "
                f"{summary.get('sim_lockstep_timeouts', 'n/a')})")
    else:
        loop = (f"tracker at {f(summary['tracker_loop_rate_hz'])} Hz, period error p50 "
                f"{f(jit['p50'], '.3f')} ms, p99 {f(jit['p99'], '.3f')} ms (worst p99 "
                f"{f(jit['p99_worst'], '.3f')} ms), max {f(jit['max'], '.3f')} ms")
    safety = summary.get("tracker_safety") or {}
    if safety:
        loop += "; tracker " + ", ".join(f"{k} {v}" for k, v in safety.items())
    lines.append(f"{loop}; sim real-time factor {f(summary['sim_real_time_factor'], '.2f')}")
    cpu = summary.get("cpu_core_s_per_sim_s")
    if cpu:
        lines.append("CPU over the episodes, core-seconds per sim second: " + ", ".join(
            f"{name} {value:.2f}" for name, value in cpu.items()))
    restarts = {node: n for node, n in (summary.get("restarts") or {}).items() if n}
    if restarts:
        exits = {node: p.get("exits", []) for node, p in (summary.get("processes") or {}).items()}
        lines.append("node restarts: " + "; ".join(
            f"{node} x{n}" + (f" (exited: {', '.join(exits[node])})" if exits.get(node) else "")
            for node, n in restarts.items()))
    lines.append(f"ERROR on /diagnostics from start-up on: {format_errors(summary)}")
    warnings = summary.get("diagnostics_startup_warnings") or {}
    if warnings:
        lines.append("start-up states (WARN on /diagnostics before the graph was ready, "
                     "expected): " + "; ".join(f"{node} x{w['count']}: "
                                              f"{' | '.join(w['messages'])}"
                                              for node, w in warnings.items()))
    return "\n".join(lines)


def format_errors(summary: dict) -> str:
    """Every ERROR status per node, from the first /diagnostics message on, saying how
    many came before the graph was ready."""
    errors = summary.get("diagnostics_errors") or {}
    if not errors:
        return "none"
    return "; ".join(
        f"{node} x{e['count']}"
        + (f" ({e['before_ready']} before the graph was ready)" if e.get("before_ready") else "")
        + f": {' | '.join(e['messages'])}" for node, e in errors.items())
