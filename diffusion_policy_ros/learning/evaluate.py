"""``dpr eval``: the policy in closed loop in the MuJoCo simulation, in process.

Same scene, camera, perception pipeline and ``PdTracker`` as the ROS system
(``GraspEnv``), the policy through ``PolicyRunner``; one chunk per control
period conditioned on the last To observations (one control period apart, as
in training). Sim time stands still while the policy computes, so chunks
arrive with zero latency here; the ROS path (``--ros``) has real latency.

``instruction_mode``: ``task`` (the episode's instruction), ``wrong`` (the
instruction for another object, the same for the whole episode: a policy
that follows the words must then mostly lift that other object, i.e. score a
high wrong-object rate and a low success rate), or ``switch`` (the wrong
instruction first, the episode's own from ``SWITCH_AFTER_S`` of sim time on:
success means the policy dropped the old target and pursued the new one).

Initial noise (``noise``): ``stream`` (default) draws new noise for every chunk
from a generator seeded by the episode seed, so an episode is reproducible and, as
with ``policy_node``'s fresh noise, a hover cannot become a fixed point of
sampling; ``fixed`` starts every chunk from the same seeded noise (the earlier
default, which succeeded less often on the plain task than the stream with the same
weights and seeds: docs/training.md, "Shipped policy"); ``fresh`` draws unseeded noise.

Grasp recovery (``grasp_retry``, ``grasp_lift``): as ``policy_node`` does with its
default parameters (``config/policy_node.yaml``), a gripper that closed on nothing is
re-opened for a moment (``policy.grasp_retry``) and a grasp that stalled wide on the
table is lifted (``policy.grasp_lift``); with both off the policy's chunks are executed
unchanged. Each episode's re-openings and lifts are in its record.

``media_dir``: per episode a GIF of the camera view with the end-effector
path of each chunk drawn in (forward kinematics of its joint positions) and a
plot of tracker references vs measured joints and the chunk latency
(``episode_<seed>.gif`` / ``.png``).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from diffusion_policy_ros.description import URDF_PATH
from diffusion_policy_ros.perception.image_decoding import decode_color
from diffusion_policy_ros.policy.grasp_recovery import GraspRecovery
from diffusion_policy_ros.policy.kinematics import urdf_kinematics
from diffusion_policy_ros.policy.node_config import configured_policy_node
from diffusion_policy_ros.policy.runner import PolicyRunner
from diffusion_policy_ros.sim.env import GraspEnv
from diffusion_policy_ros.sim.ik import TcpIk
from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES, JOINT_NAMES
from diffusion_policy_ros.sim.sim_config import load_sim_config
from diffusion_policy_ros.sim.task import (
    SWITCH_AFTER_S,
    TEMPLATES,
    GraspTask,
    wrong_instruction,
)
from diffusion_policy_ros.viz.episode_media import EpisodeRecording, PathProjector

INSTRUCTION_MODES = ("task", "wrong", "switch")
NOISE_MODES = ("stream", "fixed", "fresh")


@dataclasses.dataclass
class EpisodeOutcome:
    seed: int
    target: str
    instruction: str
    template: str
    success: bool
    wrong_object: str | None
    timed_out: bool
    episode_time_s: float
    chunk_latency_ms: list[float]
    grasp_retries: int = 0
    grasp_lifts: int = 0


def _template_of(instruction: str) -> str:
    for template in TEMPLATES:
        head = template.split("{")[0]
        if instruction.startswith(head) and head:
            return template
    return "other"


def _result(outcome: EpisodeOutcome) -> str:
    if outcome.success:
        return "success"
    return f"wrong object {outcome.wrong_object}" if outcome.wrong_object else "timeout"


class _EpisodeMedia:
    """Feeds an ``EpisodeRecording`` from the in-process loop."""

    def __init__(self, env: GraspEnv, title: str):
        self.env = env
        self.fk = TcpIk(env.runtime.scene.model)
        self.recording = EpisodeRecording(JOINT_NAMES, env.runtime.time_s, title)

    def after_physics_step(self, runtime) -> None:
        """Every physics step; the recording keeps 50 Hz of it (``signal_period_s``)."""
        self.recording.add_measured(runtime.time_s, runtime.scene.joint_positions())
        command = runtime.last_command
        if command is not None and command.gripper_opening_m is not None:
            self.recording.add_reference(runtime.time_s,
                                         [*command.q_ref, command.gripper_opening_m])

    def chunk(self, chunk: np.ndarray, latency_ms: float) -> None:
        path = np.array([self.fk.forward(row[:6])[0] for row in chunk])
        self.recording.set_path(path, closing=chunk[-1, 6] < chunk[0, 6] - 1e-3)
        self.recording.add_chunk(self.env.runtime.time_s, latency_ms)

    def frame(self, caption: str) -> None:
        frame = self.env.last_frame
        self.recording.add_frame(frame.stamp_s, decode_color(frame.color), caption)

    def write(self, out_dir: Path, stem: str, caption: str) -> dict[str, str]:
        self.frame(caption)
        pipeline = self.env.pipeline
        projector = PathProjector(pipeline.camera, pipeline.camera_to_base)
        return self.recording.write(out_dir, stem, projector)


def run_policy_episode(env: GraspEnv, runner: PolicyRunner, seed: int,
                       instruction_mode: str = "task",
                       media_dir: str | Path | None = None,
                       noise: str = "stream",
                       grasp_recovery: GraspRecovery | None = None) -> EpisodeOutcome:
    if noise not in NOISE_MODES:
        raise ValueError(f"noise must be one of {NOISE_MODES}, got {noise!r}")
    obs, info = env.reset(seed)
    if grasp_recovery is not None:
        grasp_recovery.restart()
        retries_before = grasp_recovery.retries_total
        lifts_before = grasp_recovery.lifts_total
    task = info["task"]
    instruction = task.instruction
    if instruction_mode in ("wrong", "switch"):
        instruction = wrong_instruction(task.target, env.runtime.scene.object_names, seed)
        obs, info = env.reset(seed, task=GraspTask(task.target, instruction))
    n_obs = runner.config.n_obs_steps
    history = collections.deque([obs] * n_obs, maxlen=n_obs)
    media = _EpisodeMedia(env, f"seed {seed}: '{instruction}' (target {task.target})") \
        if media_dir is not None else None
    env.after_physics_step = media.after_physics_step if media else None
    latencies, done = [], False
    start_s = obs["stamp_s"]
    chunk_noise = {"stream": runner.noise_stream(seed), "fixed": seed, "fresh": None}[noise]
    try:
        while not done:
            if (instruction_mode == "switch" and instruction != task.instruction
                    and obs["stamp_s"] - start_s >= SWITCH_AFTER_S):
                # As policy_node does on every instruction: a new history from this frame.
                instruction = task.instruction
                history.extend([obs] * n_obs)
                if grasp_recovery is not None:  # a new task, as policy_node's new instruction
                    grasp_recovery.restart()
            t0 = time.perf_counter()
            chunk = runner.predict(list(history), instruction, noise=chunk_noise)
            latencies.append((time.perf_counter() - t0) * 1e3)
            if grasp_recovery is not None:
                chunk = grasp_recovery.apply(chunk, history[-1]["joint_positions"],
                                             history[-1]["stamp_s"])
            if media:
                media.chunk(chunk, latencies[-1])
                media.frame(f"'{instruction}'")
            obs, _, terminated, truncated, info = env.step(chunk, history[-1]["stamp_s"])
            history.append(obs)
            done = terminated or truncated
    finally:
        env.after_physics_step = None
    state = info["task"]
    outcome = EpisodeOutcome(seed, state.target, instruction, _template_of(instruction),
                             state.success, state.wrong_object, state.timed_out,
                             state.elapsed_s, latencies,
                             grasp_recovery.retries_total - retries_before
                             if grasp_recovery is not None else 0,
                             grasp_recovery.lifts_total - lifts_before
                             if grasp_recovery is not None else 0)
    if media:
        media.write(Path(media_dir), f"episode_{seed}", f"'{instruction}': {_result(outcome)}")
    return outcome


def summarize(outcomes: list[EpisodeOutcome]) -> dict:
    def rate(items, pred) -> float:
        return float(np.mean([pred(o) for o in items])) if items else float("nan")

    latency = np.concatenate([o.chunk_latency_ms for o in outcomes])
    by = collections.defaultdict(list)
    for o in outcomes:
        by[("target", o.target)].append(o)
        by[("template", o.template)].append(o)
    return {
        "episodes": len(outcomes),
        "success_rate": rate(outcomes, lambda o: o.success),
        "wrong_object_rate": rate(outcomes, lambda o: o.wrong_object is not None),
        "timeout_rate": rate(outcomes, lambda o: o.timed_out),
        "grasp_retries": int(sum(o.grasp_retries for o in outcomes)),
        "episodes_with_grasp_retries": int(sum(o.grasp_retries > 0 for o in outcomes)),
        "episodes_with_grasp_lifts": int(sum(o.grasp_lifts > 0 for o in outcomes)),
        "chunk_latency_ms_p50": float(np.median(latency)),
        "chunk_latency_ms_p99": float(np.percentile(latency, 99)),
        "per_target": {k[1]: rate(v, lambda o: o.success) for k, v in sorted(by.items())
                       if k[0] == "target"},
        "per_template": {k[1]: rate(v, lambda o: o.success) for k, v in sorted(by.items())
                         if k[0] == "template"},
    }


def evaluate(checkpoint: str | Path, episodes: int = 100, seed: int = 0,
             instruction_mode: str = "task", device: str = "cpu",
             num_inference_steps: int | None = None, num_threads: int | None = 1,
             progress: bool = True,
             media_dir: str | Path | None = None,
             noise: str = "stream",
             num_samples: int | None = None,
             depth_noise: bool = False,
             resolution: Sequence[int] | None = None,
             backend: str = "torch",
             grasp_retry: bool | None = None,
             grasp_lift: bool | None = None,
             precision: str = "fp32") -> tuple[dict, list[EpisodeOutcome]]:
    """Closed-loop episodes with seeds ``seed .. seed + episodes - 1`` (``depth_noise``:
    the simulated Kinect's time-of-flight noise and dropouts on, a robustness check; the
    demonstrations are recorded without; ``resolution``: the camera's [width, height],
    None = config/sim.yaml's; ``grasp_retry``: None = as policy_node's
    config/policy_node.yaml; ``grasp_lift`` likewise)."""
    if instruction_mode not in INSTRUCTION_MODES:
        raise ValueError(f"instruction_mode must be one of {INSTRUCTION_MODES}")
    runner = PolicyRunner.from_checkpoint(checkpoint, joint_names=list(JOINT_NAMES),
                                          device=device, num_inference_steps=num_inference_steps,
                                          num_samples=num_samples, num_threads=num_threads,
                                          backend=backend, precision=precision)
    config = load_sim_config()
    config = dataclasses.replace(config, render_observations=True, depth_noise=depth_noise,
                                 resolution=list(resolution or config.resolution),
                                 chunk_horizon=runner.config.horizon,
                                 chunk_dt_s=runner.config.action_dt_s)
    runner.warmup("pick up the red cube")  # one-off costs stay out of the latency figures
    node_config = configured_policy_node()
    retry_config, lift_config = node_config.grasp_retry, node_config.grasp_lift
    if grasp_retry is not None:
        retry_config.enabled = grasp_retry
    if grasp_lift is not None:
        lift_config.enabled = grasp_lift
    recovery = None
    if retry_config.enabled or lift_config.enabled:
        kinematics = (urdf_kinematics(URDF_PATH, ARM_JOINT_NAMES, node_config.tool_link)
                      if lift_config.enabled else None)
        recovery = GraspRecovery(retry_config, lift_config, kinematics,
                                 runner.config.action_dt_s)
    outcomes = []
    with GraspEnv(config) as env:
        for i in range(episodes):
            outcomes.append(run_policy_episode(env, runner, seed + i, instruction_mode,
                                               media_dir, noise, recovery))
            if progress:
                o = outcomes[-1]
                retried = f", {o.grasp_retries} grasp retries" if o.grasp_retries else ""
                retried += f", {o.grasp_lifts} grasp lift" if o.grasp_lifts else ""
                print(f"[{i + 1}/{episodes}] seed {o.seed} {o.target}: {_result(o)} "
                      f"({o.episode_time_s:.1f} s, '{o.instruction}'{retried})", flush=True)
    policy = {"checkpoint": str(checkpoint), "backend": backend, "precision": precision,
              "num_inference_steps": runner.num_inference_steps,
              "num_samples": runner.num_samples}
    camera = {"resolution": list(config.resolution), "depth_noise": depth_noise}
    return {**summarize(outcomes), "grasp_retry": retry_config.enabled,
            "grasp_retry_max_retries": retry_config.max_retries if retry_config.enabled
            else None,
            "grasp_lift": lift_config.enabled, "policy": policy, "camera": camera}, outcomes


def write_report(path: str | Path, summary: dict, outcomes: list[EpisodeOutcome]) -> None:
    doc = {"summary": summary, "episodes": [dataclasses.asdict(o) for o in outcomes]}
    Path(path).write_text(json.dumps(doc, indent=2))
