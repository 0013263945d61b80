"""``dpr collect``: scripted-expert demonstrations in simulation, one rosbag2 per episode.

Each episode runs ``GraspEnv`` (the same scene, camera, perception pipeline
and ``PdTracker`` as the ROS system) with ``ScriptedExpert`` choosing every
chunk, and records what a real robot would: ``observation/image`` +
``observation/points`` at the control rate, ``joint_states`` at the physics
rate (500 Hz), the ``instruction``, every commanded ``policy/action_chunk``
(stamped with its observation) and the ``episode/outcome``; with
``raw_camera`` also the Kinect frames behind each observation.

Successful episodes go to ``OUT/episode_SSSSSS``; failed ones to
``OUT/failed/episode_SSSSSS`` (kept, counted, never read as training data).
An episode is written under ``OUT/.partial/`` and moved into place when
complete, so an interrupted run never leaves a half episode among the data,
and an existing episode is never overwritten (the writer refuses).

With ``pushes`` the arm is pushed at random while the expert approaches
(``sim.pushes``, DART-style): the chunks recorded are still the commands, now
also corrections from off-path states; the outcome counts the pushes.

With ``switches`` every episode starts with an instruction naming another
object, which the expert goes for, and switches to the episode's own
instruction at a random instant of the approach (``SwitchConfig``), before
the gripper closes; the expert turns to the new target from wherever the arm
is. The bag holds both instructions with their stamps (training reads the one
in force at each frame), the outcome the first instruction and the switch
time. These teach the policy to drop a target when told to.

With ``recovery`` (DAgger-style, ``RecoveryConfig``) a trained policy drives
the arm first (with ``switches`` through the same instruction switch), until
a random instant or until it starts closing the gripper; then the expert
takes over from wherever the policy left the arm (``ScriptedExpert.take_over``)
and only the expert's part is recorded: corrections from the states the
policy itself reaches, such as hovering near the target without descending.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from diffusion_policy_ros.instructions.descriptions import describe_without_colour
from diffusion_policy_ros.learning.episode_bag import JOINT_NAMES, EpisodeBagWriter
from diffusion_policy_ros.sim.env import GraspEnv
from diffusion_policy_ros.sim.expert import ExpertConfig, Phase, ScriptedExpert
from diffusion_policy_ros.sim.pushes import ArmPushes, PushConfig
from diffusion_policy_ros.sim.scene import GRIPPER_OPEN_M
from diffusion_policy_ros.sim.sim_config import SimConfig, load_sim_config
from diffusion_policy_ros.sim.task import GraspTask, other_task

FAILED_DIR = "failed"
PARTIAL_DIR = ".partial"


def episode_name(seed: int) -> str:
    return f"episode_{seed:06d}"


def _ns(t_s: float) -> int:
    return int(round(t_s * 1e9))


@dataclasses.dataclass
class CollectionReport:
    episodes: int
    succeeded: int
    failed_seeds: list[int]
    sim_time_s: float
    wall_time_s: float
    bytes_on_disk: int

    @property
    def realtime_factor(self) -> float:
        return self.sim_time_s / self.wall_time_s

    def summary(self) -> str:
        per_episode_mb = self.bytes_on_disk / max(1, self.episodes) / 1e6
        return (f"episodes {self.episodes}, expert succeeded {self.succeeded}, failed "
                f"{len(self.failed_seeds)} {self.failed_seeds or ''}\n"
                f"sim time {self.sim_time_s:.1f} s in {self.wall_time_s:.1f} s wall: "
                f"{self.realtime_factor:.1f}x real time\n"
                f"disk {self.bytes_on_disk / 1e6:.1f} MB, {per_episode_mb:.2f} MB per episode")


_PUSHED_PHASES = (Phase.PRE_GRASP, Phase.DESCEND)
_PUSH_STREAM = 3  # random stream of the pushes, apart from the layout's and the task's
_SWITCH_STREAM = 4
_RECOVERY_STREAM = 5
_DESCRIPTION_STREAM = 6
_CLOSING_LOOKAHEAD = 2  # chunk points the tracker reaches before the next chunk (0.2 s)


@dataclasses.dataclass(frozen=True)
class SwitchConfig:
    """When the instruction switches: uniform in [earliest_s, latest_s] after the
    episode start, or as soon as the expert starts descending onto the first object."""

    earliest_s: float = 0.3
    latest_s: float = 1.5

    def __post_init__(self):
        if not 0.0 <= self.earliest_s <= self.latest_s:
            raise ValueError(f"need 0 <= earliest_s <= latest_s, got {self}")


@dataclasses.dataclass(frozen=True)
class RecoveryConfig:
    """The policy that drives before the expert takes over, and when it hands over: at a
    uniform instant in [earliest_s, latest_s] after the episode start (after the
    instruction switch with ``switches``), or as soon as its commanded gripper opening
    falls ``closing_m`` below open within the next 0.2 s."""

    checkpoint: str
    earliest_s: float = 0.5
    latest_s: float = 5.0
    closing_m: float = 0.01

    def __post_init__(self):
        if not 0.0 <= self.earliest_s <= self.latest_s:
            raise ValueError(f"need 0 <= earliest_s <= latest_s, got {self}")
        if self.closing_m <= 0.0:
            raise ValueError(f"closing_m must be > 0, got {self.closing_m}")


class _InstructionSwitch:
    """The first (other object's) task of a switched episode and when to switch."""

    def __init__(self, config: SwitchConfig, target: str, object_names, seed: int,
                 start_s: float):
        rng = np.random.default_rng([_SWITCH_STREAM, seed])
        self.first = other_task(target, object_names, rng)
        self.start_s = start_s
        self.at_s = start_s + rng.uniform(config.earliest_s, config.latest_s)
        self.done_s: float | None = None

    def due(self, now_s: float, phase: Phase | None = None) -> bool:
        """Not yet switched, and its instant has come or the expert (``phase``) descends."""
        return self.done_s is None and (now_s >= self.at_s - 1e-9 or phase is Phase.DESCEND)


class _PolicyPrefix:
    """The policy's unrecorded part of a recovery episode (``RecoveryConfig``)."""

    def __init__(self, config: RecoveryConfig, runner, seed: int):
        self.config = config
        self.runner = runner
        self.seed = seed
        self.handover_s: float | None = None
        self.reason = ""

    def drive(self, env: GraspEnv, obs: dict, task: GraspTask,
              switch: _InstructionSwitch | None) -> tuple[dict, dict | None]:
        """Step the policy until the hand-over; (observation there, the step info if the
        episode ended first, else None)."""
        c = self.config
        rng = np.random.default_rng([_RECOVERY_STREAM, self.seed])
        start_s = switch.at_s if switch is not None else obs["stamp_s"]
        handover_at_s = start_s + rng.uniform(c.earliest_s, c.latest_s)
        history = collections.deque([obs] * self.runner.config.n_obs_steps,
                                    maxlen=self.runner.config.n_obs_steps)
        instruction = switch.first.instruction if switch is not None else task.instruction
        noise = self.runner.noise_stream(self.seed)  # as dpr eval: new noise per chunk
        while True:
            now_s = obs["stamp_s"]
            if switch is not None and switch.due(now_s):
                instruction, switch.done_s = task.instruction, now_s
            if now_s >= handover_at_s - 1e-9:
                self.reason = "time"
                break
            chunk = self.runner.predict(list(history), instruction, noise=noise)
            if chunk[:_CLOSING_LOOKAHEAD, 6].min() < GRIPPER_OPEN_M - c.closing_m:
                self.reason = "closing"
                break
            obs, _, terminated, truncated, info = env.step(chunk, now_s)
            history.append(obs)
            if terminated or truncated:
                self.reason = "ended"
                return obs, info
        self.handover_s = obs["stamp_s"]
        return obs, None


def record_episode(env: GraspEnv, expert: ScriptedExpert, seed: int, path: Path,
                   raw_camera: bool, pushes: PushConfig | None = None,
                   switches: SwitchConfig | None = None,
                   prefix: _PolicyPrefix | None = None,
                   descriptions: float = 0.0) -> tuple[bool, float]:
    """Run and record one episode; returns (success, episode sim time s). With
    probability ``descriptions`` the episode asks for its object without its colour
    (``instructions.descriptions``), where the layout allows."""
    obs, info = env.reset(seed)
    task = info["task"]
    rng = np.random.default_rng([_DESCRIPTION_STREAM, seed])
    if descriptions > 0.0 and rng.random() < descriptions:
        sentence = describe_without_colour(task.target, env.runtime.referents(), rng)
        if sentence is not None:
            task = GraspTask(task.target, sentence)
            obs, info = env.reset(seed, task=task)
    start_s = obs["stamp_s"]
    switch = None
    if switches is not None:
        switch = _InstructionSwitch(switches, task.target, env.runtime.scene.on_table_names,
                                    seed, obs["stamp_s"])
        obs, info = env.reset(seed, task=GraspTask(task.target, switch.first.instruction))
    if prefix is not None:
        obs, ended = prefix.drive(env, obs, task, switch)
        if ended is not None:
            with EpisodeBagWriter(path, raw_camera=raw_camera) as bag:
                state = ended["task"]
                bag.outcome(_ns(env.runtime.time_s), {
                    "seed": seed, "target": state.target, "success": False,
                    "wrong_object": state.wrong_object, "timed_out": state.timed_out,
                    "episode_time_s": state.elapsed_s, "recovery": "the policy ended the "
                    "episode before the hand-over"})
            return False, state.elapsed_s
        if switch is not None and switch.done_s is None:  # it closed before the switch
            switch.done_s = obs["stamp_s"]
        expert.take_over(task.target, env.runtime.scene)
        first_phase = str(expert.phase)
    else:
        expert.reset(switch.first.target if switch else task.target)
    push = None
    if pushes is not None:
        push = ArmPushes(pushes, env.runtime.tracker_config.kp, seed=[_PUSH_STREAM, seed],
                         start_s=obs["stamp_s"])
    with EpisodeBagWriter(path, raw_camera=raw_camera) as bag:
        bag.instruction(_ns(obs["stamp_s"]),
                        task.instruction if prefix is not None else obs["instruction"])

        def after_physics_step(runtime) -> None:
            """Record joint_states at the physics rate; set the next push torque."""
            scene = runtime.scene
            bag.joint_state(_ns(runtime.time_s), scene.joint_positions(),
                            scene.joint_velocities(), scene.joint_efforts())
            if push is not None:
                scene.push_arm(push.torque_nm(runtime.time_s, expert.phase in _PUSHED_PHASES))

        env.after_physics_step = after_physics_step
        after_physics_step(env.runtime)
        done = False
        while not done:
            stamp = _ns(obs["stamp_s"])
            if switch is not None and switch.due(obs["stamp_s"], expert.phase):
                if expert.can_retarget:  # else it closed on the first object: a failure
                    expert.retarget(task.target)
                bag.instruction(stamp, task.instruction)
                switch.done_s = obs["stamp_s"]
            bag.observation(stamp, obs["image"], obs["points"], obs["point_colors"])
            if raw_camera:
                frame = env.last_frame
                assert frame is not None  # rendered by the observation
                bag.raw_camera_frame(stamp, frame.color, frame.depth, frame.camera)
            chunk = expert.act(env.runtime.scene)
            bag.action_chunk(stamp, chunk, env.config.chunk_dt_s, JOINT_NAMES)
            obs, _, terminated, truncated, info = env.step(chunk, obs["stamp_s"])
            done = terminated or truncated
        env.after_physics_step = None
        state = info["task"]
        outcome = {"seed": seed, "target": state.target, "instruction": state.instruction,
                   "success": state.success, "wrong_object": state.wrong_object,
                   "timed_out": state.timed_out, "episode_time_s": state.elapsed_s}
        if push is not None:
            outcome |= {"pushes": push.count, "max_push_nm": push.max_peak_nm.round(2).tolist()}
        if switch is not None:
            outcome |= {"first_instruction": switch.first.instruction,
                        "first_target": switch.first.target,
                        "switch_s": None if switch.done_s is None
                        else round(switch.done_s - switch.start_s, 3)}
        if prefix is not None:
            outcome |= {"recovery_checkpoint": prefix.config.checkpoint,
                        "handover_s": round(prefix.handover_s - start_s, 3),
                        "handover": prefix.reason, "expert_phase_at_handover": first_phase}
        bag.outcome(_ns(env.runtime.time_s), outcome)
    return state.success, state.elapsed_s


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def collect(episodes: int, out: str | Path, seed: int = 0, raw_camera: bool = False,
            config: SimConfig | None = None, progress: bool = True,
            pushes: PushConfig | None = None,
            switches: SwitchConfig | None = None,
            recovery: RecoveryConfig | None = None,
            descriptions: float = 0.0) -> CollectionReport:
    """Record ``episodes`` expert episodes with seeds ``seed, seed + 1, ...`` into ``out``
    (``pushes``: push the arm during the approach; ``switches``: switch the instruction
    during it; ``recovery``: a policy drives first, the expert takes over; see the module
    docstring)."""
    if not 0.0 <= descriptions <= 1.0:
        raise ValueError(f"descriptions is a share of the episodes, 0 to 1: {descriptions}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = dataclasses.replace(config or load_sim_config(), render_observations=True)
    runner = None
    if recovery is not None:
        from diffusion_policy_ros.policy.runner import PolicyRunner

        runner = PolicyRunner.from_checkpoint(recovery.checkpoint, joint_names=list(JOINT_NAMES),
                                              num_threads=1)
        if (runner.config.horizon, runner.config.action_dt_s) != (config.chunk_horizon,
                                                                   config.chunk_dt_s):
            raise ValueError(f"{recovery.checkpoint}: its chunks ({runner.config.horizon} x "
                             f"{runner.config.action_dt_s} s) are not the expert's "
                             f"({config.chunk_horizon} x {config.chunk_dt_s} s)")
    expert_config = ExpertConfig(horizon=config.chunk_horizon, dt_s=config.chunk_dt_s)
    seeds = range(seed, seed + episodes)
    existing = [out / d / episode_name(s) for s in seeds for d in ("", FAILED_DIR)
                if (out / d / episode_name(s)).exists()]
    if existing:
        raise FileExistsError(f"{existing[0]} exists (and {len(existing) - 1} more): recorded "
                              "episodes are never overwritten; use another --out or --seed")
    failed, sim_time, succeeded, written = [], 0.0, 0, 0
    t0 = time.perf_counter()
    with GraspEnv(config) as env:
        expert = ScriptedExpert(env.runtime.scene.model, expert_config)
        bar = tqdm(seeds, desc="collect", unit="ep", disable=not progress)
        for s in bar:
            tmp = out / PARTIAL_DIR / episode_name(s)
            if tmp.exists():
                shutil.rmtree(tmp)  # left by an interrupted run; never a finished episode
            tmp.parent.mkdir(exist_ok=True)
            prefix = _PolicyPrefix(recovery, runner, s) if recovery is not None else None
            ok, episode_s = record_episode(env, expert, s, tmp, raw_camera, pushes, switches,
                                           prefix, descriptions)
            final = out / episode_name(s) if ok else out / FAILED_DIR / episode_name(s)
            final.parent.mkdir(exist_ok=True)
            tmp.rename(final)
            written += _size(final)
            sim_time += episode_s
            succeeded += ok
            if not ok:
                failed.append(s)
            bar.set_postfix(success=f"{succeeded}/{s - seed + 1}")
    (out / PARTIAL_DIR).rmdir()
    report = CollectionReport(episodes, succeeded, failed, sim_time,
                              time.perf_counter() - t0, written)
    (out / f"collection_{seed:06d}.json").write_text(json.dumps(
        dataclasses.asdict(report) | {"realtime_factor": report.realtime_factor,
                                      "raw_camera": raw_camera, "first_seed": seed,
                                      "pushes": dataclasses.asdict(pushes) if pushes else None,
                                      "switches": (dataclasses.asdict(switches) if switches
                                                   else None),
                                      "recovery": (dataclasses.asdict(recovery) if recovery
                                                   else None),
                                      "descriptions": descriptions,
                                      "object_set": config.object_set},
        indent=2))
    return report
