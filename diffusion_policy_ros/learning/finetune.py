"""``dpr finetune``: PPO fine-tuning of a diffusion policy in the simulation.

One iteration = rollouts, then the update:

1. **Rollouts** (``RolloutCollector``): ``num_envs`` ``GraspRlEnv`` simulations in
   worker processes (gymnasium ``AsyncVectorEnv``); the policy runs batched over them
   in this process, one chunk per control step, with Gaussian exploration of the arm
   paths around its sampler's chunk (``ppo_policy.py``). Every env runs whole
   episodes until it has collected ``steps_per_env`` steps, so an iteration holds
   complete episodes and the last step of each env ends one (no bootstrap, and a
   resumed run restarts exactly). With ``replay_report``, a ``replay_probability``
   share of episodes replays seeds the starting policy failed (``replay_pool``; success
   on fresh seeds is logged apart). Each new frame is encoded once and its features
   kept while it is in the To history. Samples go to a preallocated
   ``RolloutBuffer`` that is reused across iterations.
2. **Update** (``PpoLearner``, ``learning/ppo_update.py``, which imports no simulator) on
   ``update_threads`` (the rollout workers are idle meanwhile): GAE
   (gamma, lambda) over the whole buffer at once, advantages
   normalised (over every rank), then ``epochs`` x ``minibatches`` steps of the clipped
   surrogate + ``kl_weight`` x KL to the starting policy + ``value_weight`` x the value
   loss, gradient clipping, early stop at ``target_kl``. The first
   ``critic_warmup_iterations`` train the value network only.

Two stages, as in the seed: first the encoders and fusion are frozen and the condition
of each observation is computed once at rollout time and stored (the update runs the
denoiser and the critic only); from ``frozen_iterations`` on the joint stage stores the
raw observation history and trains encoders and fusion as well (``encoder_lr``), through
gradient checkpointing of the observation encoding; the KL reference then keeps frame
features of its own, each frame encoded once as the policy's.

Under ``torchrun`` every process runs its own envs (their episode seeds interleave) and
DistributedDataParallel averages the gradients (gloo on the CPU, nccl on CUDA, hccl
on Ascend); rank 0 logs and saves. Output: ``checkpoint/`` (a policy checkpoint that
``dpr eval``, ``policy_node`` and ``dpr bringup`` load), ``training_state.*`` (exact
resume: weights, critic, AdamW moments, generator states, episode counters),
``log.jsonl``, TensorBoard scalars under ``tb/`` and ``learning_curve.png``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import torch.utils.checkpoint
from tqdm import tqdm

from diffusion_policy_ros.acting.agent import PolicyAgent
from diffusion_policy_ros.acting.grasp_rules import GraspRulesConfig, grasp_rules, load_grasp_rules
from diffusion_policy_ros.acting.observation_history import Refusal, Selection
from diffusion_policy_ros.description import TOOL_LINK, URDF_PATH
from diffusion_policy_ros.errors import RunStopped
from diffusion_policy_ros.learning.distributed import training_precision
from diffusion_policy_ros.learning.finetune_config import FinetuneConfig
from diffusion_policy_ros.learning.ppo import (
    RolloutBuffer,
)
from diffusion_policy_ros.learning.ppo_policy import (
    DiffusionActorCritic,
    ValueNetwork,
    gaussian_entropy,
    gaussian_log_prob,
)
from diffusion_policy_ros.learning.ppo_update import PpoLearner, rollout_fields
from diffusion_policy_ros.learning.rl_env import (
    GraspRlEnv,
    NonFiniteStepError,
    RewardConfig,
)
from diffusion_policy_ros.learning.training_loop import (
    JsonLog,
    LoopConfig,
    RunSettings,
    TrainingLoop,
    TrainingRun,
    open_run,
)
from diffusion_policy_ros.policy.checkpoint import load_checkpoint, save_checkpoint
from diffusion_policy_ros.policy.devices import autocast_context
from diffusion_policy_ros.policy.features import IMAGE, LANGUAGE, POINTS_RGB, POINTS_XYZ, STATE
from diffusion_policy_ros.policy.kinematics import urdf_kinematics
from diffusion_policy_ros.policy.language import LanguageEmbedder
from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES, JOINT_NAMES
from diffusion_policy_ros.sim.sim_config import load_sim_config

CHECKPOINT_DIR = "checkpoint"
LOG = "log.jsonl"
CURVE = "learning_curve.png"
TERMS = ("success", "distance_improvement", "smoothness")


class FinetuneStopped(RuntimeError, RunStopped):
    """The run stopped before its end for a reason named in the message (a non-finite
    observation or reward, a dead rollout worker); the last checkpoint is intact."""


def make_rl_env(config: FinetuneConfig, seed_start: int, seed_stride: int,
                image_size, num_points: int) -> GraspRlEnv:
    """One training env (module level, so worker processes can build it)."""
    sim = dataclasses.replace(load_sim_config(), time_limit_s=config.time_limit_s)
    reward = RewardConfig(config.success_weight, config.distance_weight,
                          config.smoothness_weight)
    return GraspRlEnv(sim, reward, depth_noise=config.depth_noise,
                      switch_probability=config.switch_probability, seed_start=seed_start,
                      seed_stride=seed_stride, image_size=tuple(image_size),
                      num_points=num_points)


#: The held-out episodes every evaluation quotes (``dpr eval --seed 5000``); never trained on.
HELD_OUT_SEEDS = range(5000, 5100)


def replay_pool(config: FinetuneConfig) -> list[int]:
    """The seeds ``config.replay_report`` (a ``dpr eval --report`` JSON) failed, sorted.

    Why a pool: the starting policy lifts about nine in ten training episodes, so an
    iteration's few failures are all PPO learns a better grasp from; replaying the
    seeds it failed puts more of them into every update. A report that failed a
    held-out seed is refused, as training on it would bias every evaluation.
    """
    if not config.replay_report or config.replay_probability <= 0.0:
        return []
    path = Path(config.replay_report)
    try:
        episodes = json.loads(path.read_text(encoding="utf-8"))["episodes"]
        failed = sorted({int(e["seed"]) for e in episodes if not e["success"]})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"replay_report {path}: not a dpr eval report ({exc})") from exc
    held_out = [s for s in failed if s in HELD_OUT_SEEDS]
    if held_out:
        raise ValueError(f"replay_report {path} names held-out seeds {held_out[:5]} "
                         f"({HELD_OUT_SEEDS.start}-{HELD_OUT_SEEDS.stop - 1}); evaluate "
                         "training seeds, e.g. dpr eval --seed 200000")
    if not failed:
        raise ValueError(f"replay_report {path}: no failed episode to replay")
    return failed


def exploration_std(config: FinetuneConfig, iteration: int) -> float:
    """Linear from ``std_start`` to ``std_min`` over ``std_decay_iterations``."""
    if config.std_decay_iterations == 0:
        return config.std_min
    frac = min(1.0, iteration / config.std_decay_iterations)
    return config.std_start + frac * (config.std_min - config.std_start)


@dataclasses.dataclass
class EpisodeRecord:
    seed: int
    success: bool
    wrong_object: bool
    steps: int
    episode_return: float
    terms: dict[str, float]
    replayed: bool = False


#: How long closing the rollout workers waits for a pending step before ending them.
WORKER_CLOSE_TIMEOUT_S = 5.0


def _terminate_workers(envs: gym.vector.AsyncVectorEnv) -> None:
    """End the workers of ``envs`` by PID. Not gymnasium's ``close(terminate=True)``:
    with a step pending it first reads the dead worker's pipe and fails again, and the
    run's reason would end as that EOFError."""
    for process in envs.processes:
        if process.is_alive():
            process.terminate()
        process.join(timeout=10.0)
    for pipe in envs.parent_pipes:
        if pipe is not None:
            pipe.close()
    envs.closed = True  # nothing left for close() or __del__ to do


class RolloutCollector:
    """Vectorised envs + the policy batched over them -> a filled ``RolloutBuffer``.

    Each env's acting loop is a ``PolicyAgent``'s, as in ``policy_node`` and ``dpr eval``:
    its history gives the To frames of every step (a new episode or instruction starts a
    task), and its chunk rules (``config.rules``) act on the explored chunk before the env
    executes it. The policy itself runs here, batched over the envs and exploring."""

    def __init__(self, ac: DiffusionActorCritic, reference, config: FinetuneConfig,
                 device: torch.device, precision: str, rank: int, world: int):
        self.ac, self.reference, self.config = ac, reference, config
        self.device, self.precision = device, precision
        c = ac.config
        n = config.num_envs
        self.replay_seeds = replay_pool(config)  # before any worker starts: may refuse
        rules = load_grasp_rules(config.rules) if config.rules else GraspRulesConfig()
        arm = (urdf_kinematics(URDF_PATH, ARM_JOINT_NAMES, TOOL_LINK)
               if rules.grasp_lift.enabled else None)
        self.agents = [PolicyAgent(JOINT_NAMES) for _ in range(n)]
        for agent in self.agents:  # each env's rules keep their own state
            agent.load(ac.policy, grasp_rules(rules.grasp_retry, rules.grasp_lift,
                                              c.action_dt_s, arm))
        self.first_env = rank * n
        self.total_envs = world * n
        fns = [functools.partial(make_rl_env, config, 0, 1, c.image_size, c.num_points)
               for _ in range(n)]
        # Not the base VectorEnv: its reset types one seed, these take one per env.
        self.envs: gym.vector.AsyncVectorEnv | gym.vector.SyncVectorEnv
        if config.vector_env == "async":
            # Observations through the pipes: gymnasium reads a Text space out of shared
            # memory only once, so the instruction would never change there.
            self.envs = gym.vector.AsyncVectorEnv(
                fns, context="spawn", shared_memory=False,
                autoreset_mode=gym.vector.AutoresetMode.DISABLED)
        else:
            self.envs = gym.vector.SyncVectorEnv(
                fns, autoreset_mode=gym.vector.AutoresetMode.DISABLED)
        #: Episodes each env has started (its k in seed + g + k * G), saved for resume.
        self.episodes_started = np.zeros(n, dtype=np.int64)
        self.replaying = np.zeros(n, dtype=bool)  # each env's current episode is a replay
        self.language = LanguageEmbedder(c.language_model)
        self.generator = torch.Generator(device=device).manual_seed(config.seed + rank)
        self._buffers: dict[bool, RolloutBuffer] = {}

    def close(self) -> None:
        """End the envs. A dead worker: the others are ended by PID at once. Otherwise
        gymnasium's close, bounded: with a step pending it first waits for every worker's
        answer, and a worker that already answered would keep it waiting forever."""
        envs = self.envs
        if isinstance(envs, gym.vector.AsyncVectorEnv):
            if not all(process.is_alive() for process in envs.processes):
                _terminate_workers(envs)
                return
            try:
                envs.close(timeout=WORKER_CLOSE_TIMEOUT_S)
            except (OSError, EOFError):  # a worker died meanwhile
                _terminate_workers(envs)
        else:
            envs.close()

    def _next_seed(self, env: int) -> int:
        """A fresh seed, or with ``replay_probability`` one of the replayed failures; the
        choice depends only on (seed, env, k), so a resumed run draws the same."""
        k = int(self.episodes_started[env])
        self.episodes_started[env] += 1
        g = self.first_env + env
        if self.replay_seeds:
            rng = np.random.default_rng([self.config.seed, g, k])
            self.replaying[env] = rng.random() < self.config.replay_probability
            if self.replaying[env]:
                return int(rng.choice(self.replay_seeds))
        return self.config.seed + g + k * self.total_envs

    def buffer(self, joint: bool) -> RolloutBuffer:
        """The (reused) buffer of a stage; the joint stage also keeps raw observations."""
        if joint not in self._buffers:
            capacity = self.config.steps_per_env + int(round(self.config.time_limit_s / 0.1))
            self._buffers[joint] = RolloutBuffer(rollout_fields(self.ac, joint), capacity,
                                                 self.config.num_envs)
        return self._buffers[joint]

    def _embed(self, instructions) -> torch.Tensor:
        return torch.from_numpy(np.stack([self.language.embed(str(s)) for s in instructions])
                                ).float().to(self.device)

    def _encode(self, policy, obs: dict, envs: np.ndarray, language: torch.Tensor) -> dict:
        """Frame features of the newest observation of ``envs`` ((M, ...) each)."""
        image = torch.from_numpy(obs["image"][envs]).to(self.device).permute(0, 3, 1, 2)
        xyz = torch.from_numpy(obs["points"][envs]).to(self.device)
        rgb = torch.from_numpy(obs["point_colors"][envs]).to(self.device)
        return policy.encode_frames(image, xyz, rgb, language)

    @torch.no_grad()
    def collect(self, std: float, joint: bool, progress: bool = False,
                description: str = "") -> tuple[RolloutBuffer, list[EpisodeRecord]]:
        """Run every env through whole episodes until each has ``steps_per_env`` steps."""
        cfg, ac, device = self.config, self.ac, self.device
        n = cfg.num_envs
        buffer = self.buffer(joint)
        buffer.clear()
        current_seed = [self._next_seed(i) for i in range(n)]
        seeds: list[int | None] = list(current_seed)
        obs, _ = self.envs.reset(seed=seeds)
        # Per env: frame features by stamp (ns), the policy's and the reference's (joint
        # stage), of the frames its agent may still select.
        features: list[dict] = [{} for _ in range(n)]
        ref_features: list[dict] = [{} for _ in range(n)]
        starting = np.ones(n, dtype=bool)  # the env's next observation begins an episode
        steps = np.zeros(n, dtype=np.int64)
        active = np.ones(n, dtype=bool)
        totals = [dict(ret=0.0, steps=0, **dict.fromkeys(TERMS, 0.0)) for _ in range(n)]
        episodes: list[EpisodeRecord] = []
        bar = tqdm(total=n * cfg.steps_per_env, desc=description, unit="step",
                   disable=not progress, leave=False)
        t = 0
        try:
            while active.any():
                idx = np.flatnonzero(active)
                language = self._embed([obs["instruction"][i] for i in idx])
                with autocast_context(device, self.precision):
                    new = self._encode(ac.policy, obs, idx, language)
                    # The joint stage trains the policy's encoders away from the
                    # reference's, whose frames are then encoded (once each) too.
                    ref_new = self._encode(self.reference, obs, idx, language) if joint else None
                selections: list[Selection] = []  # the step's, of env idx[j] at j
                for j, i in enumerate(idx):
                    agent, text = self.agents[i], str(obs["instruction"][i])
                    stamp_ns = int(round(float(obs["elapsed_s"][i][0]) * 1e9))
                    if starting[i] or text != agent.words:
                        # A new episode or instruction: a new task, as policy_node starts.
                        agent.restart(text, stamp_ns, new_dialogue=bool(starting[i]))
                        features[i].clear()
                        ref_features[i].clear()
                        starting[i] = False
                    agent.add_observation(stamp_ns, {k: obs[k][i] for k in (
                        "image", "points", "point_colors", "joint_positions")})
                    features[i][stamp_ns] = {k: v[j:j + 1] for k, v in new.items()}
                    if joint:
                        assert ref_new is not None  # encoded in the joint stage
                        ref_features[i][stamp_ns] = {k: v[j:j + 1] for k, v in ref_new.items()}
                    selection = agent.select(stamp_ns)
                    if isinstance(selection, Refusal):  # the env's frames are complete
                        raise RuntimeError(f"episode seed {current_seed[i]}: {selection.detail}")
                    selections.append(selection)
                    # What no step selects again.
                    _forget_before(selection.frame_stamps_ns[0], features[i], ref_features[i])
                history = _stack_history(features, selections, idx)
                state = torch.from_numpy(np.stack([np.stack([o["joint_positions"]
                                                             for o in selection.observations])
                                                   for selection in selections])
                                         ).float().to(device)
                elapsed = torch.from_numpy(obs["elapsed_s"][idx]).float().to(device)
                with autocast_context(device, self.precision):
                    cond, _ = ac.policy.condition_from_frames(history, language, state)
                    noises = ac.initial_noise(len(idx), self.generator, device)
                    mean = ac.mean_chunk(cond, noises)
                    raw_batch = None
                    if joint:
                        raw_batch = self._raw_batch(selections, language, state)
                        ref_cond, _ = self.reference.condition_from_frames(
                            _stack_history(ref_features, selections, idx), language, state)
                    else:
                        ref_cond = cond
                    ref_mean = self.reference.denoise(ref_cond, noises.transpose(0, 1)).float()
                cond = cond.float()
                mean_coefficients = ac.arm_coefficients(mean)
                action = ac.explore(mean_coefficients, std, self.generator)
                logp = gaussian_log_prob(action, mean_coefficients, std)
                value = ac.value(cond, ac.state_features(state), elapsed)
                chunk = ac.joint_targets(action, mean, state).double().cpu().numpy()
                if not (np.isfinite(chunk).all() and torch.isfinite(logp).all()
                        and torch.isfinite(value).all()):
                    bad = [current_seed[i] for i in idx]
                    raise NonFiniteStepError(f"non-finite policy output (chunk, log-prob or "
                                             f"value) for the episodes with seeds {bad}")
                actions = np.zeros((n, *chunk.shape[1:]))
                for j, i in enumerate(idx):  # the chunk rules, on the frames it answers
                    actions[i] = self.agents[i].finish(selections[j], chunk[j]).actions
                next_obs, reward, terminated, truncated, info = self.envs.step(actions)
                ended = (terminated | truncated)[idx]
                env_idx = torch.from_numpy(idx)
                record = dict(cond=cond.cpu(), state=state.cpu(), elapsed=elapsed.cpu(),
                              noises=noises.float().cpu(), action=action.cpu(),
                              ref_mean=ref_mean.cpu(), logp=logp.cpu(), value=value.cpu(),
                              reward=torch.from_numpy(reward[idx]).float(),
                              done=torch.from_numpy(ended).float())
                if joint:
                    assert raw_batch is not None  # made in the joint stage
                    record |= dict(language=language.cpu(), image=raw_batch[IMAGE].cpu(),
                                   points=raw_batch[POINTS_XYZ].cpu(),
                                   colors=raw_batch[POINTS_RGB].cpu())
                buffer.put(t, env_idx, **record)
                t += 1
                bar.update(len(idx))
                reset = np.zeros(n, dtype=bool)
                for j, i in enumerate(idx):
                    steps[i] += 1
                    tot = totals[i]
                    tot["ret"] += float(reward[i])
                    tot["steps"] += 1
                    for term in TERMS:
                        tot[term] += float(info["reward_terms"][term][i])
                    if not ended[j]:
                        continue
                    episodes.append(EpisodeRecord(  # tot["steps"] counts in ints
                        current_seed[i], bool(info["success"][i]),
                        bool(info["wrong_object"][i]), int(tot["steps"]), tot["ret"],
                        {term: tot[term] for term in TERMS}, bool(self.replaying[i])))
                    totals[i] = dict(ret=0.0, steps=0, **dict.fromkeys(TERMS, 0.0))
                    starting[i] = True
                    if steps[i] >= cfg.steps_per_env:
                        active[i] = False
                    else:
                        reset[i] = True
                if reset.any():
                    seeds = [None] * n  # None: the env is not reset
                    for e in range(n):
                        if reset[e]:
                            seeds[e] = current_seed[e] = self._next_seed(e)
                    next_obs, _ = self.envs.reset(seed=seeds, options={"reset_mask": reset})
                obs = next_obs
        finally:
            bar.close()
        return buffer, episodes

    def _raw_batch(self, selections: list[Selection], language: torch.Tensor,
                   state: torch.Tensor) -> dict[str, torch.Tensor]:
        """The selected raw observations, one row per selection."""
        def stack(key, dtype):
            return torch.from_numpy(np.stack([np.stack([np.asarray(o[key], dtype)
                                                        for o in selection.observations])
                                              for selection in selections])).to(self.device)

        return {IMAGE: stack("image", np.uint8).permute(0, 1, 4, 2, 3),
                POINTS_XYZ: stack("points", np.float32),
                POINTS_RGB: stack("point_colors", np.uint8),
                STATE: state, LANGUAGE: language}


def _stack_history(features: list[dict], selections: list[Selection],
                   idx: np.ndarray) -> dict[str, torch.Tensor]:
    """(len(idx), To, ...) per feature key: each env's features of its selected frames
    (env ``idx[j]``'s selection is ``selections[j]``)."""
    rows = [[features[i][stamp] for stamp in selection.frame_stamps_ns]
            for i, selection in zip(idx, selections, strict=True)]
    return {k: torch.stack([torch.cat([f[k] for f in row]) for row in rows])
            for k in rows[0][0]}


def _forget_before(stamp_ns: int, *caches: dict) -> None:
    """Drop the entries of ``caches`` (by stamp, ns) stamped before ``stamp_ns``."""
    for cache in caches:
        for stamp in [s for s in cache if s < stamp_ns]:
            del cache[stamp]


def update_thread_count(config: FinetuneConfig) -> int:
    """Threads of the PPO update: ``update_threads``, or this machine's cores shared
    among its ranks (``LOCAL_WORLD_SIZE``, torchrun's), since every rank's rollout
    workers wait while it runs."""
    if config.update_threads:
        return config.update_threads
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, len(os.sched_getaffinity(0)) // max(1, ranks_here))


def _episode_figures(episodes: list[EpisodeRecord], world: int) -> dict[str, float]:
    """Success, wrong-object rate, return and reward terms per episode, over all ranks."""
    fresh = [e for e in episodes if not e.replayed]
    sums = torch.tensor([len(episodes), sum(e.success for e in episodes),
                         sum(e.wrong_object for e in episodes),
                         sum(e.episode_return for e in episodes),
                         sum(e.steps for e in episodes),
                         *[sum(e.terms[t] for e in episodes) for t in TERMS],
                         len(fresh), sum(e.success for e in fresh)],
                        dtype=torch.float64)
    if world > 1:
        dist.all_reduce(sums)
    count = max(float(sums[0]), 1.0)
    out = {"episodes": int(sums[0]), "success_rate": float(sums[1]) / count,
           "wrong_object_rate": float(sums[2]) / count, "return": float(sums[3]) / count,
           "env_steps": int(sums[4])}
    out |= {f"reward_{t}": float(sums[5 + i]) / count for i, t in enumerate(TERMS)}
    n_fresh = int(sums[5 + len(TERMS)])
    # Success on fresh seeds only: the replayed failures would pull the curve down.
    out |= {"episodes_replayed": out["episodes"] - n_fresh,
            "success_rate_fresh": (float(sums[6 + len(TERMS)]) / n_fresh if n_fresh
                                   else float("nan"))}
    return out


def write_learning_curve(records: list[dict], path: Path) -> None:
    """Success rate, return and KL to the imitation policy against env steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.cumsum([r["env_steps"] for r in records])
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    axes[0].plot(steps, [r["success_rate"] for r in records], marker=".")
    axes[0].set(ylim=(0, 1.02), ylabel="rollout success rate")
    axes[1].plot(steps, [r["return"] for r in records], marker=".")
    axes[1].set(ylabel="return per episode")
    axes[2].plot(steps, [r.get("kl_ref", float("nan")) for r in records], marker=".")
    axes[2].set(ylabel="KL to imitation policy")
    for ax in axes:
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def finetune(init: str | Path, config: FinetuneConfig, out: str | Path, resume: bool = False,
             progress: bool = True) -> Path:
    """Fine-tune the checkpoint ``init`` with PPO; returns ``out/checkpoint``.

    Raises ``FinetuneStopped`` when an iteration cannot complete (the reason names the
    env seed or the dead worker); ``FileExistsError`` for a used ``out`` without ``resume``.
    """
    replay_pool(config)  # a bad replay report is refused before anything is written
    settings = RunSettings(config.device, config.num_threads, config.seed, resume)
    with open_run(out, settings) as run:
        _finetune(run, init, config, progress)
    return run.out / CHECKPOINT_DIR


def _finetune(run: TrainingRun, init: str | Path, config: FinetuneConfig,
              progress: bool) -> None:
    d, device, out = run.rank, run.device, run.out
    precision = training_precision(config.precision, device)
    update_threads = update_thread_count(config)
    policy, metadata = load_checkpoint(init, joint_names=list(JOINT_NAMES), device=device)
    reference, _ = load_checkpoint(init, device=device)
    for w in reference.parameters():
        w.requires_grad_(False)
    c = policy.config
    value = ValueNetwork(c.cond_dim, c.state_dim, config.value_hidden,
                         config.time_limit_s).to(device)
    ac = DiffusionActorCritic(policy, value)
    learner = PpoLearner(ac, config, device, precision, d.world)
    collector = RolloutCollector(ac, reference, config, device, precision, d.rank, d.world)
    iteration, env_steps, records = 0, 0, []
    if run.resuming:
        doc = learner.load_state(out, collector)
        iteration, env_steps = doc["iteration"], doc["env_steps"]
        records = [json.loads(line) for line in (out / LOG).read_text().splitlines()
                   if line.strip()][:iteration] if (out / LOG).exists() else []
    writer = None
    if d.main:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tb"), purge_step=iteration + 1)
    source = {"init": str(Path(init).resolve()), "init_weights_sha256":
              metadata.get("weights_sha256")}

    def save(iteration: int, last: bool) -> None:
        save_checkpoint(policy, out / CHECKPOINT_DIR, dataset_id=f"PPO fine-tuning of "
                        f"{source['init']} in simulation", extra={
                            "finetune": {"iterations_done": iteration,
                                         "env_steps": env_steps,
                                         "final": iteration >= config.iterations,
                                         "config": dataclasses.asdict(config), **source}})
        learner.save_state(out, {"iteration": iteration, "env_steps": env_steps}, collector)
        if records:
            write_learning_curve(records, out / CURVE)

    log = JsonLog(out / LOG if d.main else None)
    log.restart(records)  # up to the state resumed from

    def ppo_iteration(index: int) -> None:
        nonlocal env_steps
        joint = index >= config.frozen_iterations
        train_policy = index >= config.critic_warmup_iterations
        std = exploration_std(config, index)
        t0 = time.monotonic()
        try:
            buffer, episodes = collector.collect(
                std, joint, progress=progress and d.main,
                description=f"iteration {index + 1}/{config.iterations}")
        except NonFiniteStepError as exc:
            raise FinetuneStopped(f"iteration {index + 1} stopped: {exc}; the "
                                  "last checkpoint is intact") from exc
        except (EOFError, BrokenPipeError, ConnectionError) as exc:
            raise FinetuneStopped(
                f"iteration {index + 1} stopped: a rollout worker died "
                f"({type(exc).__name__}: {exc}); resume with --resume from the last "
                "checkpoint") from exc
        t1 = time.monotonic()
        rollout_threads = torch.get_num_threads()
        torch.set_num_threads(update_threads)
        try:
            stats = learner.update(buffer, std, train_policy, joint)
        finally:
            torch.set_num_threads(rollout_threads)
        t2 = time.monotonic()
        iteration = index + 1
        figures = _episode_figures(episodes, d.world)
        env_steps += int(figures["env_steps"])  # an int among the figures' floats
        record = {"iteration": iteration, "stage": "joint" if joint else "frozen",
                  "policy_trained": train_policy, **figures, "env_steps_total":
                  env_steps, "std": std, "entropy": gaussian_entropy(std), **stats,
                  "rollout_s": round(t1 - t0, 2), "update_s": round(t2 - t1, 2),
                  "env_steps_per_s": figures["env_steps"] / max(t1 - t0, 1e-9)}
        records.append(record)
        if not d.main:
            return
        log.write(record)
        assert writer is not None  # made on the main rank
        for key, val in record.items():
            if isinstance(val, int | float) and not isinstance(val, bool) \
                    and math.isfinite(val):
                writer.add_scalar(f"ppo/{key}", val, iteration)
        writer.flush()
        if progress:
            tqdm.write(f"iteration {iteration}: success {figures['success_rate']:.2f}"
                       f" over {figures['episodes']} episodes, return "
                       f"{figures['return']:.2f}, KL to imitation "
                       f"{stats.get('kl_ref', 0.0):.4f}, "
                       f"{record['env_steps_per_s']:.1f} env steps/s")

    loop = TrainingLoop(LoopConfig(config.iterations, config.checkpoint_every,
                                   config.max_minutes), save if d.main else None,
                        start_step=iteration, unit="iteration")
    try:
        loop.run(ppo_iteration)
    finally:
        collector.close()
        if writer is not None:
            writer.close()
