"""``dpr eval``: the policy in closed loop in the MuJoCo simulation, in process.

Same scene, camera, perception pipeline and ``PdTracker`` as the ROS system
(``GraspEnv``), and the same acting loop as ``policy_node`` (``acting.PolicyAgent``:
history, task restarts, noise, chunk rules); one chunk per control period, each
observation fed one control period after the last, so the To frames the agent selects
by stamp are the last To observations, as in training. Sim time stands still while the
policy computes, so chunks arrive with zero latency here; the ROS path (``--ros``) has
real latency.

``instruction_mode``: ``task`` (the episode's instruction), ``wrong`` (the
instruction for another object, the same for the whole episode: a policy
that follows the words must then mostly lift that other object, i.e. score a
high wrong-object rate and a low success rate), ``switch`` (the wrong
instruction first, the episode's own from ``SWITCH_AFTER_S`` of sim time on:
success means the policy dropped the old target and pursued the new one),
``held_out`` (the episode's target asked for with sentence patterns and words no
training sentence uses: "hand me the azure block"), or ``description`` (an object
named by shape, size and place, not its colour: "grab the smallest cube", "pick up the
cylinder on the left"; the episode's target when the layout lets words single it out,
else the first object in a seeded order that they can).

Initial noise (``noise``, ``PolicyAgent``'s): ``stream`` (default) draws new noise for
every chunk from a generator seeded by the episode seed and restarted with every task,
as ``policy_node`` with a ``seed``; ``fixed`` starts every chunk from the same seeded
noise (which succeeded less often on the plain task than the stream with the same
weights and seeds: docs/explanation/policy.md); ``fresh`` draws unseeded noise.

Chunk rules (``rules``): none by default, as ``policy_node`` without a rules file;
``dpr eval --rules config/grasp_rules.yaml`` runs the grasp rules of the simulated grasp
task (a gripper that closed on nothing re-opened, a grasp that stalled wide lifted).
Each episode's re-openings and lifts are in its record.

``media_dir``: per episode a GIF of the camera view with the end-effector
path of each chunk drawn in (forward kinematics of its joint positions) and a
plot of tracker references vs measured joints and the chunk latency
(``episode_<seed>.gif`` / ``.png``).
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from diffusion_policy_ros.acting.agent import PolicyAgent
from diffusion_policy_ros.acting.grasp_rules import GraspRulesConfig, grasp_rules
from diffusion_policy_ros.acting.observation_history import Refusal
from diffusion_policy_ros.description import TOOL_LINK, URDF_PATH
from diffusion_policy_ros.instructions.descriptions import describe_without_colour
from diffusion_policy_ros.perception.image_decoding import decode_color
from diffusion_policy_ros.policy.kinematics import urdf_kinematics
from diffusion_policy_ros.policy.runner import PolicyRunner
from diffusion_policy_ros.sim.env import GraspEnv
from diffusion_policy_ros.sim.ik import TcpIk
from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES, JOINT_NAMES
from diffusion_policy_ros.sim.sim_config import load_sim_config
from diffusion_policy_ros.sim.task import (
    HELD_OUT_TEMPLATES,
    SWITCH_AFTER_S,
    TEMPLATES,
    GraspTask,
    instruction_for,
    wrong_instruction,
)
from diffusion_policy_ros.viz.episode_media import EpisodeRecording, PathProjector

INSTRUCTION_MODES = ("task", "wrong", "switch", "held_out", "description")
#: The random stream of an episode's held-out or description sentence.
_PHRASING_STREAM = 11


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
    for template in (*TEMPLATES, *HELD_OUT_TEMPLATES):
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
        assert frame is not None  # every reset and step renders one (render_observations)
        self.recording.add_frame(frame.stamp_s, decode_color(frame.color), caption)

    def write(self, out_dir: Path, stem: str, caption: str) -> dict[str, str]:
        self.frame(caption)
        pipeline = self.env.pipeline
        # render_observations: the env made the pipeline and set its camera.
        assert pipeline is not None and pipeline.camera is not None
        projector = PathProjector(pipeline.camera, pipeline.camera_to_base)
        return self.recording.write(out_dir, stem, projector)


def run_policy_episode(env: GraspEnv, agent: PolicyAgent, seed: int,
                       instruction_mode: str = "task",
                       media_dir: str | Path | None = None) -> EpisodeOutcome:
    """One episode: the agent restarts with the episode (its noise seeded by ``seed``) and
    with the switched instruction, as ``policy_node`` does with every instruction."""
    obs, info = env.reset(seed)
    task = info["task"]
    instruction = task.instruction
    if instruction_mode in ("wrong", "switch"):
        instruction = wrong_instruction(task.target, env.runtime.scene.on_table_names, seed)
        obs, info = env.reset(seed, task=GraspTask(task.target, instruction))
    elif instruction_mode in ("held_out", "description"):
        task = _phrased_task(env, task.target, seed, instruction_mode)
        instruction = task.instruction
        obs, info = env.reset(seed, task=task)
    media = _EpisodeMedia(env, f"seed {seed}: '{instruction}' (target {task.target})") \
        if media_dir is not None else None
    env.after_physics_step = media.after_physics_step if media else None
    latencies: list[float] = []
    events: collections.Counter[str] = collections.Counter()
    done = False
    start_s = obs["stamp_s"]
    agent.restart(instruction, _stamp_ns(start_s), seed=seed, new_dialogue=True)
    try:
        while not done:
            now_ns = _stamp_ns(obs["stamp_s"])
            if (instruction_mode == "switch" and instruction != task.instruction
                    and obs["stamp_s"] - start_s >= SWITCH_AFTER_S):
                instruction = task.instruction
                agent.restart(instruction, now_ns)
            agent.add_observation(now_ns, obs)
            chunk = agent.act(now_ns)
            if isinstance(chunk, Refusal):
                raise RuntimeError(f"episode seed {seed}: no chunk at {obs['stamp_s']:.2f} s "
                                   f"({chunk.reason}: {chunk.detail})")
            latencies.append(chunk.predict_ms)
            events.update(event.kind for event in chunk.events)
            if media:
                media.chunk(chunk.actions, latencies[-1])
                media.frame(f"'{instruction}'")
            obs, _, terminated, truncated, info = env.step(chunk.actions, obs["stamp_s"])
            done = terminated or truncated
    finally:
        env.after_physics_step = None
    state = info["task"]
    template = "description" if instruction_mode == "description" else \
        _template_of(instruction)
    outcome = EpisodeOutcome(seed, state.target, instruction, template,
                             state.success, state.wrong_object, state.timed_out,
                             state.elapsed_s, latencies, events["reopened"], events["lifted"])
    if media:
        assert media_dir is not None  # media is made only with a media_dir
        media.write(Path(media_dir), f"episode_{seed}", f"'{instruction}': {_result(outcome)}")
    return outcome


def _phrased_task(env: GraspEnv, target: str, seed: int, mode: str) -> GraspTask:
    """The episode's task asked for with held-out phrasing, or by description."""
    rng = np.random.default_rng([seed, _PHRASING_STREAM])
    if mode == "held_out":
        return GraspTask(target, instruction_for(target, rng, held_out=True))
    objects = env.runtime.referents()
    others = [o.name for o in objects if o.name != target]
    for name in [target, *(others[i] for i in rng.permutation(len(others)))]:
        sentence = describe_without_colour(name, objects, rng)
        if sentence is not None:
            return GraspTask(name, sentence)
    raise RuntimeError(f"episode seed {seed}: no object of the layout can be described "
                       "without its colour")


def _stamp_ns(stamp_s: float) -> int:
    return int(round(stamp_s * 1e9))


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
             object_set: str | None = None,
             backend: str = "torch",
             rules: GraspRulesConfig | None = None,
             precision: str = "fp32") -> tuple[dict, list[EpisodeOutcome]]:
    """Closed-loop episodes with seeds ``seed .. seed + episodes - 1`` (``depth_noise``:
    the simulated Kinect's time-of-flight noise and dropouts on, a robustness check; the
    demonstrations are recorded without; ``resolution``: the camera's [width, height],
    None = config/sim.yaml's; ``object_set``: the scene's objects, None = its;
    ``rules``: the grasp rules, None = none, as ``policy_node`` without a rules file)."""
    if instruction_mode not in INSTRUCTION_MODES:
        raise ValueError(f"instruction_mode must be one of {INSTRUCTION_MODES}")
    runner = PolicyRunner.from_checkpoint(checkpoint, joint_names=list(JOINT_NAMES),
                                          device=device, num_inference_steps=num_inference_steps,
                                          num_samples=num_samples, num_threads=num_threads,
                                          backend=backend, precision=precision)
    config = load_sim_config()
    config = dataclasses.replace(config, render_observations=True, depth_noise=depth_noise,
                                 resolution=list(resolution or config.resolution),
                                 object_set=object_set or config.object_set,
                                 chunk_horizon=runner.config.horizon,
                                 chunk_dt_s=runner.config.action_dt_s)
    runner.warmup("pick up the red cube")  # one-off costs stay out of the latency figures
    rules = rules or GraspRulesConfig()
    retry_config, lift_config = rules.grasp_retry, rules.grasp_lift
    kinematics = (urdf_kinematics(URDF_PATH, ARM_JOINT_NAMES, TOOL_LINK)
                  if lift_config.enabled else None)
    agent = PolicyAgent(JOINT_NAMES, noise=noise)
    agent.load(runner, grasp_rules(retry_config, lift_config, runner.config.action_dt_s,
                                   kinematics))
    outcomes = []
    with GraspEnv(config) as env:
        for i in range(episodes):
            outcomes.append(run_policy_episode(env, agent, seed + i, instruction_mode,
                                               media_dir))
            if progress:
                o = outcomes[-1]
                retried = f", {o.grasp_retries} grasp retries" if o.grasp_retries else ""
                retried += f", {o.grasp_lifts} grasp lift" if o.grasp_lifts else ""
                print(f"[{i + 1}/{episodes}] seed {o.seed} {o.target}: {_result(o)} "
                      f"({o.episode_time_s:.1f} s, '{o.instruction}'{retried})", flush=True)
    policy = {"checkpoint": str(checkpoint), "backend": backend, "precision": precision,
              "num_inference_steps": runner.num_inference_steps,
              "num_samples": runner.num_samples}
    camera = {"resolution": list(config.resolution), "depth_noise": depth_noise,
              "object_set": config.object_set}
    return {**summarize(outcomes), "grasp_retry": retry_config.enabled,
            "grasp_retry_max_retries": retry_config.max_retries if retry_config.enabled
            else None,
            "grasp_lift": lift_config.enabled, "policy": policy, "camera": camera}, outcomes


def write_report(path: str | Path, summary: dict, outcomes: list[EpisodeOutcome]) -> None:
    doc = {"summary": summary, "episodes": [dataclasses.asdict(o) for o in outcomes]}
    Path(path).write_text(json.dumps(doc, indent=2))
