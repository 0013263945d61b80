"""``dpr bench blending``: offline, seeded comparison of the chunk blending strategies.

Pure Python, no ROS. The strategies themselves are ``control.timeline``; this module
only measures them.

``compare_blending(seed)`` drives ``PdTracker`` at 500 Hz with an ideal plant
(the arm is where the reference was one tick earlier) and a synthetic chunk
stream: smooth sinusoidal joint motion; every 100 ms a chunk of 16 points
(dt 0.1 s) predicting it from the observation stamp, arriving 50-150 ms later
(uniform jitter), each chunk off by its own offset and drift plus a little
per-point noise (consecutive chunks disagree), and once (t = 6 s) a sudden
change of plan that only chunks stamped after it know about. It reports per
strategy:

* ``rms_error_rad`` / ``max_error_rad``: reference vs. the true trajectory
  (steady: warm-up and the second after the plan change excluded),
* ``rms_error_change_rad``: the same in the second after the plan change,
* ``peak_jerk_switch``: largest |jerk| (rad/s^3) of the reference in the
  ``SWITCH_WINDOW_S`` after each chunk arrival (steps of acceleration show up
  here as ``delta_acc / dt``),
* ``peak_jerk`` / ``rms_jerk`` over the whole run, ``peak_acc`` (rad/s^2),
* ``limited_share``: share of ticks where the reference limiter had to act.

``latest_uncompensated`` is a baseline, not a strategy: latest-only with each
chunk executed from its first point at arrival (no latency compensation).

``python -m diffusion_policy_ros.bench.blending`` (mean of seeds 0-4, the
defaults; "change" = the first second after the sudden change of plan, excluded
from the steady columns) prints these per strategy; the measured table is in
docs/explanation/benchmarks.md (``dpr bench blending`` and "Measurements behind the code's
design").

Rule (``choose_strategy``): lowest steady RMS error among the strategies with
no acceleration steps at chunk switches (peak jerk there <= ``SWITCH_JERK_BUDGET``).
``ensemble`` wins on every seed 0-7: averaging the disagreeing chunks cuts
the steady error against ``crossfade`` and ``latest``, which follow each
chunk's own wobble, and the limiter almost never acts. ``latest`` re-plans
from the reference state at every late chunk and keeps running into the
acceleration limit (bang-bang jerk). The price of ensembling is lag when the
plan really changes (a larger RMS error than ``latest`` in the second after
the change); raise ``ensemble_decay_per_s`` or pick ``crossfade``/``latest``
where reaction matters more than smoothness. Without latency compensation
(chunks executed from their first point on arrival) the error is several
times larger.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from diffusion_policy_ros.control.chunk import ActionChunk
from diffusion_policy_ros.control.pd_tracker import PdTracker
from diffusion_policy_ros.control.tracker_config import BLEND_STRATEGIES, PdTrackerConfig

SWITCH_WINDOW_S = 0.02
SWITCH_JERK_BUDGET = 1000.0
"""rad/s^3; at 500 Hz an acceleration step of 2 rad/s^2 within one tick reaches it."""
WARMUP_S = 1.0
CHANGE_WINDOW_S = 1.0


@dataclasses.dataclass(frozen=True)
class SyntheticStream:
    """Parameters of the synthetic chunk stream."""

    duration_s: float = 12.0
    rate_hz: float = 500.0
    chunk_period_s: float = 0.1
    horizon: int = 16
    dt_s: float = 0.1
    latency_min_s: float = 0.05
    latency_max_s: float = 0.15
    offset_sigma_rad: float = 0.01
    """Per-chunk, per-joint constant error (chunks disagree by about this much)."""
    drift_sigma_rad_s: float = 0.03
    """Per-chunk, per-joint error growing along the horizon (rad/s)."""
    point_sigma_rad: float = 0.001
    """Independent noise per point."""
    plan_change_s: float = 6.0
    """At this time the plan changes (new goal): chunks stamped later know about it."""
    plan_change_rad: float = 0.15
    """Extra joint motion of the new plan, reached in ``plan_change_ramp_s``."""
    plan_change_ramp_s: float = 0.5


def true_trajectory(seed: int, n_joints: int = 6, stream: SyntheticStream | None = None):
    """``arm(t, known_at=inf) -> (..., n_joints)`` and ``gripper(t)``, seeded.

    ``arm(t)`` is the true plan; ``arm(t, known_at=s)`` is the plan as known at
    time ``s`` (without the plan change when ``s`` is before it).
    """
    stream = stream or SyntheticStream()
    rng = np.random.default_rng(seed)
    amp = rng.uniform(0.2, 0.5, n_joints)
    freq = rng.uniform(0.15, 0.4, n_joints)
    phase = rng.uniform(0.0, 2 * math.pi, n_joints)
    offset = rng.uniform(-0.5, 0.5, n_joints)
    change = stream.plan_change_rad * rng.choice([-1.0, 1.0], n_joints)

    def arm(t, known_at: float = math.inf):
        t = np.asarray(t, dtype=float)[..., None]
        q = offset + amp * np.sin(2 * math.pi * freq * t + phase)
        if known_at >= stream.plan_change_s:
            u = np.clip((t - stream.plan_change_s) / stream.plan_change_ramp_s, 0.0, 1.0)
            q = q + change * u ** 3 * (10 - 15 * u + 6 * u ** 2)
        return q

    def gripper(t):
        # Open, close around t = 4 s, open again around t = 8 s (smooth ramps).
        t = np.asarray(t, dtype=float)
        close = 1.0 / (1.0 + np.exp(-(t - 4.0) * 8.0)) - 1.0 / (1.0 + np.exp(-(t - 8.0) * 8.0))
        return 0.08 - 0.07 * close

    return arm, gripper


def synthetic_chunks(seed: int, stream: SyntheticStream, joint_names, gripper_joint):
    """``[(arrival_s, ActionChunk)]`` sorted by arrival."""
    rng = np.random.default_rng(seed + 1000)
    arm, gripper = true_trajectory(seed, len(joint_names), stream)
    names = [*joint_names, gripper_joint]
    out = []
    n = int(stream.duration_s / stream.chunk_period_s)
    k = np.arange(stream.horizon)
    tfs = k * stream.dt_s
    for i in range(n):
        stamp = i * stream.chunk_period_s
        latency = rng.uniform(stream.latency_min_s, stream.latency_max_s)
        t = stamp + tfs
        q = arm(t, known_at=stamp)
        q = (q + rng.normal(0, stream.offset_sigma_rad, q.shape[1])
             + np.outer(tfs, rng.normal(0, stream.drift_sigma_rad_s, q.shape[1]))
             + rng.normal(0, stream.point_sigma_rad, q.shape))
        g = gripper(t)[:, None]
        positions = np.hstack([q, g]).tolist()
        out.append((stamp + latency, ActionChunk(stamp, names, tfs.tolist(), positions)))
    out.sort(key=lambda item: item[0])
    return out


def run_stream(config: PdTrackerConfig, seed: int, stream: SyntheticStream | None = None,
               compensate_latency: bool = True) -> dict[str, np.ndarray]:
    """Simulate; returns times, reference positions/velocities, truth and arrival times."""
    stream = stream or SyntheticStream()
    tracker = PdTracker(config)
    chunks = synthetic_chunks(seed, stream, config.joint_names, config.gripper_joint)
    arm, _ = true_trajectory(seed, config.num_joints, stream)
    h = 1.0 / stream.rate_hz
    n_ticks = int(stream.duration_s / h)
    q = arm(0.0).tolist()
    qd = [0.0] * config.num_joints
    times = np.arange(n_ticks) * h
    ref = np.empty((n_ticks, config.num_joints))
    vel = np.empty_like(ref)
    limited = np.zeros(n_ticks, dtype=bool)
    arrivals = []
    c = 0
    for i, now in enumerate(times.tolist()):
        while c < len(chunks) and chunks[c][0] <= now:
            arrival, chunk = chunks[c]
            if not compensate_latency:
                chunk = dataclasses.replace(chunk, stamp_s=now)
            if tracker.submit_chunk(chunk, now).accepted:
                arrivals.append(now)
            c += 1
        cmd = tracker.tick(now, q, qd, now)
        q, qd = list(cmd.q_ref), list(cmd.qd_ref)
        ref[i] = q
        vel[i] = qd
        limited[i] = tracker.limiter.saturated
    return {"t": times, "q_ref": ref, "qd_ref": vel, "truth": arm(times),
            "arrivals": np.asarray(arrivals), "limited": limited}


def smoothness_metrics(run: dict[str, np.ndarray], h: float,
                       stream: SyntheticStream) -> dict[str, float]:
    t = run["t"]
    acc = np.diff(run["qd_ref"], axis=0) / h
    jerk = np.abs(np.diff(acc, axis=0)) / h
    t0 = stream.plan_change_s
    steady = (t >= WARMUP_S) & ((t < t0) | (t > t0 + CHANGE_WINDOW_S))
    change = (t >= t0) & (t <= t0 + CHANGE_WINDOW_S)
    t_jerk = t[2:]
    keep = t_jerk >= WARMUP_S
    near_switch = np.zeros_like(keep)
    for a in run["arrivals"]:
        near_switch |= (t_jerk >= a) & (t_jerk <= a + SWITCH_WINDOW_S)
    near_switch &= steady[2:]
    err = run["q_ref"] - run["truth"]
    jerk_max = jerk.max(axis=1)
    return {
        "rms_error_rad": float(np.sqrt(np.mean(err[steady] ** 2))),
        "max_error_rad": float(np.abs(err[steady]).max()),
        "rms_error_change_rad": float(np.sqrt(np.mean(err[change] ** 2))),
        "peak_jerk_switch": float(jerk_max[keep & near_switch].max()),
        "peak_jerk": float(jerk_max[keep].max()),
        "rms_jerk": float(np.sqrt(np.mean(jerk[keep] ** 2))),
        "peak_acc": float(np.abs(acc[t[1:] >= WARMUP_S]).max()),
        "limited_share": float(run["limited"][t >= WARMUP_S].mean()),
    }


def compare_blending(seed: int = 0, config: PdTrackerConfig | None = None,
                     stream: SyntheticStream | None = None) -> dict[str, dict[str, float]]:
    """Metrics per strategy (and the ``latest_uncompensated`` baseline) for one seed."""
    base = config or PdTrackerConfig()
    stream = stream or SyntheticStream()
    h = 1.0 / stream.rate_hz
    base = dataclasses.replace(base, rate_hz=stream.rate_hz)
    out = {}
    for name in BLEND_STRATEGIES:
        cfg = dataclasses.replace(base, blend_strategy=name)
        out[name] = smoothness_metrics(run_stream(cfg, seed, stream), h, stream)
    cfg = dataclasses.replace(base, blend_strategy="latest")
    out["latest_uncompensated"] = smoothness_metrics(
        run_stream(cfg, seed, stream, compensate_latency=False), h, stream)
    return out


def choose_strategy(results: dict[str, dict[str, float]]) -> str:
    """The documented rule: lowest steady RMS error among the strategies without
    acceleration steps at chunk switches (``peak_jerk_switch <= SWITCH_JERK_BUDGET``)."""
    smooth = [name for name in BLEND_STRATEGIES
              if results[name]["peak_jerk_switch"] <= SWITCH_JERK_BUDGET]
    return min(smooth or BLEND_STRATEGIES, key=lambda name: results[name]["rms_error_rad"])


def compare_blending_seeds(seeds=range(5), config: PdTrackerConfig | None = None,
                           stream: SyntheticStream | None = None) -> dict[str, dict[str, float]]:
    """Mean of ``compare_blending`` over ``seeds``."""
    runs = [compare_blending(s, config, stream) for s in seeds]
    return {name: {m: float(np.mean([r[name][m] for r in runs])) for m in runs[0][name]}
            for name in runs[0]}


def format_table(results: dict[str, dict[str, float]]) -> str:
    cols = ("rms_error_rad", "max_error_rad", "rms_error_change_rad", "peak_jerk_switch",
            "peak_jerk", "rms_jerk", "peak_acc", "limited_share")
    lines = [f"{'strategy':22s}" + "".join(f"{c:>21s}" for c in cols)]
    for name, m in results.items():
        lines.append(f"{name:22s}" + "".join(f"{m[c]:21.4g}" for c in cols))
    return "\n".join(lines)


def main() -> None:
    print(format_table(compare_blending_seeds()))


if __name__ == "__main__":
    main()
