"""``dpr replay``: the policy run offline over a recorded rosbag2, scored against the recording.

The bag is read with ``read_episode`` (``dpr collect`` bags, or raw Kinect +
``joint_states`` + ``instruction`` bags from ``ros2 bag record``: the node's
sync buffer and perception then run over the recorded stream). Observations
are visited in recorded stamp order; the policy is queried once per control
period (``action_dt_s``, as ``policy_node`` runs), conditioned on To frames
``action_dt_s`` apart (the newest frame at or before each earlier instant,
the first frame repeated at the start, as in training).

Report (``report.json`` + PNG plots in the report directory):

- ``action_error``: mean absolute error per horizon step k against the
  recorded targets (the commanded chunk of that observation, or without
  recorded chunks the joint positions that followed, see ``action_source``),
  arm joints in rad, gripper opening in m, and per joint.
- ``gripper_agreement``: per step, the fraction of chunks where predicted
  and recorded agree on open (opening > threshold) vs closed.
- ``latency_ms``: wall time of each ``PolicyRunner.predict`` (p50/p99/max).
- ``discontinuity``: for consecutive chunks i, i+1, chunk i interpolated
  (linearly, in time) at the instants of chunk i+1's points that fall in
  chunk i's span; max absolute difference per pair (arm rad / gripper m),
  and the jump at the switch instant (chunk i+1 step 0).

Nothing here imports rclpy.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from diffusion_policy_ros.config import SHIPPED_CHECKPOINT
from diffusion_policy_ros.errors import InputError
from diffusion_policy_ros.learning.dataset import episode_instructions
from diffusion_policy_ros.learning.episode_bag import JOINT_NAMES, EpisodeRecord, read_episode

REPORT_FILE = "report.json"
PLOT_FILES = ("trajectories.png", "error_vs_horizon.png", "latency_discontinuity.png")
ARM = slice(0, 6)
GRIPPER = 6


class ReplayError(RuntimeError, InputError):
    """Replay cannot run (no checkpoint, report exists, policy and bag do not fit)."""


@dataclasses.dataclass
class ReplayOptions:
    bag: Path
    checkpoint: Path | None = None
    report_dir: Path | None = None
    force: bool = False
    device: str = "cpu"
    num_inference_steps: int | None = None
    num_threads: int | None = 1
    seed: int = 0
    period_s: float | None = None
    """Seconds between policy queries; None: the checkpoint's action_dt_s; 0: every frame."""
    gripper_open_m: float = 0.04
    plot_joints: tuple[int, ...] = (0, 1, 2, GRIPPER)
    progress: bool = False


@dataclasses.dataclass
class ReplayResult:
    report: dict
    report_dir: Path
    stamps_ns: np.ndarray
    """(M,) stamps of the observations the policy was queried on."""
    predicted: np.ndarray
    """(M, T, 7) predicted chunks."""
    recorded: np.ndarray
    """(M, T, 7) recorded targets for the same observations."""


def default_report_dir(bag: str | Path) -> Path:
    bag = Path(bag)
    return bag.parent / f"{bag.name}_replay"


def resolve_checkpoint(checkpoint: str | Path | None) -> Path:
    path = Path(checkpoint) if checkpoint else SHIPPED_CHECKPOINT
    if not path.is_dir():
        raise ReplayError(f"checkpoint {path}: no such directory; pass --checkpoint DIR "
                          "(a checkpoint directory written by dpr train)")
    return path


def check_report_dir(report_dir: Path, force: bool) -> None:
    if report_dir.exists() and not report_dir.is_dir():
        raise ReplayError(f"report {report_dir} exists and is not a directory")
    if report_dir.is_dir() and any(report_dir.iterdir()) and not force:
        raise FileExistsError(f"report {report_dir} exists and is not empty; pass --force to "
                              "overwrite it or --report DIR to write elsewhere")


# --------------------------------------------------------------------------- schedule


def query_indices(stamps_ns: np.ndarray, period_s: float) -> np.ndarray:
    """Observations the policy is queried on: the first, then each >= ~period_s later."""
    if period_s <= 0:
        return np.arange(len(stamps_ns))
    period, tol = period_s * 1e9, 0.25 * period_s * 1e9
    chosen, last = [], None
    for i, s in enumerate(stamps_ns):
        if last is None or s - last >= period - tol:
            chosen.append(i)
            last = s if last is None else last + period * max(1, round((s - last) / period))
    return np.asarray(chosen, dtype=np.int64)


def history_indices(stamps_ns: np.ndarray, i: int, n_obs: int, dt_s: float) -> list[int]:
    """To frames for query i, oldest first, ``dt_s`` apart (newest frame at or before)."""
    tol = 0.25 * dt_s * 1e9
    out = []
    for j in range(n_obs):
        target = stamps_ns[i] - (n_obs - 1 - j) * dt_s * 1e9
        k = int(np.searchsorted(stamps_ns, target + tol, side="right")) - 1
        out.append(min(max(k, 0), i))
    return out


# --------------------------------------------------------------------------- metrics


def _stats(values) -> dict:
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"n": 0, "mean": None, "p50": None, "p99": None, "max": None}
    return {"n": int(v.size), "mean": float(v.mean()), "p50": float(np.median(v)),
            "p99": float(np.percentile(v, 99)), "max": float(v.max())}


def action_error(predicted: np.ndarray, recorded: np.ndarray) -> dict:
    err = np.abs(predicted - recorded)  # (M, T, 7)
    per_joint = err.mean(axis=0)  # (T, 7)
    return {
        "arm_rad": {"per_step": per_joint[:, ARM].mean(axis=1).tolist(),
                    "mean": float(err[..., ARM].mean())},
        "gripper_m": {"per_step": per_joint[:, GRIPPER].tolist(),
                      "mean": float(err[..., GRIPPER].mean())},
        "per_joint_per_step": {name: per_joint[:, j].tolist()
                               for j, name in enumerate(JOINT_NAMES)},
    }


def gripper_agreement(predicted: np.ndarray, recorded: np.ndarray, open_m: float) -> dict:
    agree = (predicted[..., GRIPPER] > open_m) == (recorded[..., GRIPPER] > open_m)  # (M, T)
    return {"threshold_m": open_m, "per_step": agree.mean(axis=0).tolist(),
            "mean": float(agree.mean()),
            "recorded_open_fraction": float((recorded[..., GRIPPER] > open_m).mean()),
            "predicted_open_fraction": float((predicted[..., GRIPPER] > open_m).mean())}


def chunk_discontinuity(stamps_ns: np.ndarray, predicted: np.ndarray, dt_s: float) -> dict:
    """Consecutive chunks compared on their time overlap (chunk i interpolated linearly)."""
    horizon = predicted.shape[1]
    steps_s = np.arange(horizon) * dt_s
    arm, grip, arm_jump, grip_jump, no_overlap = [], [], [], [], 0
    for i in range(len(stamps_ns) - 1):
        t_prev = (stamps_ns[i] - stamps_ns[0]) * 1e-9 + steps_s
        t_next = (stamps_ns[i + 1] - stamps_ns[0]) * 1e-9 + steps_s
        mask = t_next <= t_prev[-1] + 1e-9
        if not mask.any():
            no_overlap += 1
            continue
        prev = np.stack([np.interp(t_next[mask], t_prev, predicted[i, :, j])
                         for j in range(predicted.shape[2])], axis=-1)
        diff = np.abs(predicted[i + 1][mask] - prev)
        arm.append(diff[:, ARM].max())
        grip.append(diff[:, GRIPPER].max())
        arm_jump.append(diff[0, ARM].max())
        grip_jump.append(diff[0, GRIPPER].max())
    return {"pairs": len(arm), "pairs_without_overlap": no_overlap,
            "overlap_max_arm_rad": _stats(arm), "overlap_max_gripper_m": _stats(grip),
            "switch_jump_arm_rad": _stats(arm_jump), "switch_jump_gripper_m": _stats(grip_jump),
            "per_pair_overlap_max_arm_rad": [float(v) for v in arm]}


# --------------------------------------------------------------------------- plots


def write_plots(report_dir: Path, episode: EpisodeRecord, result: ReplayResult, dt_s: float,
                joints: tuple[int, ...]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = episode.stamps_ns[0]
    t_obs = (episode.stamps_ns - t0) * 1e-9
    t_q = (result.stamps_ns - t0) * 1e-9
    steps = np.arange(result.predicted.shape[1])
    report = result.report

    fig, axes = plt.subplots(len(joints), 1, figsize=(9, 2.2 * len(joints)), sharex=True,
                             squeeze=False)
    for ax, j in zip(axes[:, 0], joints, strict=True):
        ax.plot(t_obs, episode.joint_positions[:, j], color="0.6", lw=2, label="joint_states")
        ax.plot(t_q, result.recorded[:, 0, j], "k--", lw=1,
                label=f"recorded target ({episode.action_source})")
        for m in range(len(t_q)):
            ax.plot(t_q[m] + steps * dt_s, result.predicted[m, :, j], color="C0", lw=0.6,
                    alpha=0.35, label="predicted chunks" if m == 0 else None)
        ax.plot(t_q, result.predicted[:, 0, j], "o", color="C1", ms=2.5,
                label="predicted step 0")
        ax.set_ylabel(f"{JOINT_NAMES[j]}\n({'m' if j == GRIPPER else 'rad'})")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc="best")
    axes[0, 0].set_title(f"{episode.path.name}: '{episode.instruction}'")
    axes[-1, 0].set_xlabel("time since first observation (s)")
    fig.tight_layout()
    fig.savefig(report_dir / PLOT_FILES[0], dpi=100)
    plt.close(fig)

    err, agree = report["action_error"], report["gripper_agreement"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for name in JOINT_NAMES[:6]:
        axes[0].plot(steps, err["per_joint_per_step"][name], lw=0.8, alpha=0.6, label=name)
    axes[0].plot(steps, err["arm_rad"]["per_step"], "k", lw=2, label="arm mean")
    axes[0].set(title="arm |error| vs horizon step", xlabel="step k", ylabel="rad")
    axes[0].legend(fontsize=6)
    axes[1].plot(steps, err["gripper_m"]["per_step"], "C3", lw=2)
    axes[1].set(title="gripper |error| vs horizon step", xlabel="step k", ylabel="m")
    axes[2].plot(steps, agree["per_step"], "C2", lw=2)
    axes[2].set(title=f"gripper open/closed agreement (> {agree['threshold_m']} m)",
                xlabel="step k", ylabel="fraction", ylim=(-0.02, 1.02))
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(report_dir / PLOT_FILES[1], dpi=100)
    plt.close(fig)

    lat = np.asarray(report["latency_ms"]["per_chunk"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
    axes[0].hist(lat, bins=min(40, max(5, len(lat) // 2)), color="C0")
    for key, style in (("p50", "--"), ("p99", ":")):
        axes[0].axvline(report["latency_ms"][key], color="k", ls=style, label=key)
    axes[0].set(title="policy predict latency", xlabel="ms", ylabel="chunks")
    axes[0].legend(fontsize=7)
    disc = report["discontinuity"]["per_pair_overlap_max_arm_rad"]
    axes[1].plot(t_q[1:1 + len(disc)], disc, ".-", color="C4", lw=0.8)
    axes[1].set(title="chunk-to-chunk discontinuity on overlap (arm)", xlabel="time (s)",
                ylabel="max |diff| (rad)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(report_dir / PLOT_FILES[2], dpi=100)
    plt.close(fig)
    return list(PLOT_FILES)


# --------------------------------------------------------------------------- run


def replay(options: ReplayOptions) -> ReplayResult:
    """Run the policy over the bag and write the report (see module docstring).

    Raises ``BagError`` (unreadable bag), ``FileExistsError`` (report exists,
    no ``force``) or ``ReplayError``.
    """
    from diffusion_policy_ros.policy.checkpoint import load_checkpoint
    from diffusion_policy_ros.policy.runner import PolicyRunner

    bag = Path(options.bag)
    report_dir = Path(options.report_dir) if options.report_dir else default_report_dir(bag)
    check_report_dir(report_dir, options.force)
    checkpoint = resolve_checkpoint(options.checkpoint)
    policy, _ = load_checkpoint(checkpoint, joint_names=list(JOINT_NAMES))
    config = policy.config
    episode = read_episode(bag, horizon=config.horizon, dt_s=config.action_dt_s)
    expected = {"image": (tuple(config.image_size) + (3,), episode.images.shape[1:]),
                "points": ((config.num_points, 3), episode.points.shape[1:])}
    for key, (want, got) in expected.items():
        if tuple(want) != tuple(got):
            raise ReplayError(f"{bag}: observation {key} has shape {got}, the policy expects "
                              f"{want} (perception settings differ from training)")
    runner = PolicyRunner(policy, device=options.device, num_threads=options.num_threads,
                          num_inference_steps=options.num_inference_steps)

    dt = config.action_dt_s
    period = dt if options.period_s is None else options.period_s
    queries = query_indices(episode.stamps_ns, period)
    frames = [{"image": episode.images[i], "points": episode.points[i],
               "point_colors": episode.colors[i],
               "joint_positions": episode.joint_positions[i].astype(np.float32)}
              for i in range(len(episode))]
    chunks, latency, stages = [], [], []
    for text in episode_instructions([episode]):
        runner.language.embed(text)  # load the encoder and cache outside the timing
    for n, i in enumerate(queries):
        history = [frames[k] for k in history_indices(episode.stamps_ns, i,
                                                      config.n_obs_steps, dt)]
        t0 = time.perf_counter()
        chunks.append(runner.predict(history, episode.instruction_at(i),
                                        noise=options.seed + n))
        latency.append((time.perf_counter() - t0) * 1e3)
        stages.append(runner.last_timings_ms)
        if options.progress and (n + 1) % 20 == 0:
            print(f"[{n + 1}/{len(queries)}] chunks", flush=True)
    predicted = np.stack(chunks)
    recorded = episode.actions[queries].astype(np.float64)
    stamps = episode.stamps_ns[queries]
    stage_names = sorted({k for s in stages for k in s})
    report = {
        "bag": str(bag), "checkpoint": str(checkpoint), "instruction": episode.instruction,
        "outcome": episode.outcome, "action_source": episode.action_source,
        "observations": len(episode), "chunks": int(len(queries)),
        "episode_s": float((episode.stamps_ns[-1] - episode.stamps_ns[0]) * 1e-9),
        "query_period_s": period, "horizon": config.horizon, "action_dt_s": dt,
        "n_obs_steps": config.n_obs_steps, "num_inference_steps": runner.num_inference_steps,
        "device": str(runner.device), "seed": options.seed,
        "action_error": action_error(predicted, recorded),
        "gripper_agreement": gripper_agreement(predicted, recorded, options.gripper_open_m),
        "latency_ms": {**_stats(latency), "per_chunk": latency,
                       "stage_median_ms": {k: float(np.median([s[k] for s in stages if k in s]))
                                           for k in stage_names}},
        "discontinuity": chunk_discontinuity(stamps, predicted, dt),
    }
    result = ReplayResult(report, report_dir, stamps, predicted, recorded)
    report_dir.mkdir(parents=True, exist_ok=True)
    report["plots"] = write_plots(report_dir, episode, result, dt, options.plot_joints)
    (report_dir / REPORT_FILE).write_text(json.dumps(report, indent=2))
    return result


def summary_text(report: dict) -> str:
    err, lat, disc = report["action_error"], report["latency_ms"], report["discontinuity"]
    arm, grip = err["arm_rad"]["per_step"], err["gripper_m"]["per_step"]
    overlap = disc["overlap_max_arm_rad"]
    lines = [
        f"{report['bag']}: {report['chunks']} chunks over {report['observations']} observations "
        f"({report['episode_s']:.1f} s), targets from {report['action_source']}",
        f"arm |error| rad: step 0 {arm[0]:.4f}, step {len(arm) - 1} {arm[-1]:.4f}, "
        f"mean {err['arm_rad']['mean']:.4f}",
        f"gripper |error| m: step 0 {grip[0]:.4f}, step {len(grip) - 1} {grip[-1]:.4f}; "
        f"open/closed agreement {report['gripper_agreement']['mean']:.2f}",
        f"predict latency ms: p50 {lat['p50']:.1f}, p99 {lat['p99']:.1f}, max {lat['max']:.1f}",
    ]
    if overlap["n"]:
        lines.append(f"chunk discontinuity (arm, rad): p50 {overlap['p50']:.4f}, "
                     f"max {overlap['max']:.4f} over {overlap['n']} pairs")
    return "\n".join(lines)
