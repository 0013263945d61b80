"""How good and how fast the scripted expert is: ``python -m diffusion_policy_ros.sim.expert_eval``.

Runs seeded episodes of ``GraspEnv`` with ``ScriptedExpert`` choosing every
chunk (through the real ``PdTracker``, one tick per physics step) and prints
success rate, wrong-object rate, mean episode time and the wall-clock
real-time factor (sim time / wall time, resets and planning included).
Demonstrations are only as good as this number, so it is measured, not assumed.
By default no camera is rendered (the expert does not look); ``--render``
includes the camera and the RGB-D pipeline, i.e. the cost of collecting data.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from diffusion_policy_ros.sim.env import GraspEnv
from diffusion_policy_ros.sim.expert import ExpertConfig, ScriptedExpert
from diffusion_policy_ros.sim.sim_config import SimConfig, load_sim_config


@dataclasses.dataclass(frozen=True)
class EpisodeResult:
    seed: int
    target: str
    instruction: str
    success: bool
    wrong_object: str | None
    timed_out: bool
    episode_time_s: float
    """Sim time until the episode ended (s)."""


@dataclasses.dataclass(frozen=True)
class ExpertEvaluation:
    episodes: tuple[EpisodeResult, ...]
    wall_time_s: float

    @property
    def success_rate(self) -> float:
        return float(np.mean([e.success for e in self.episodes]))

    @property
    def wrong_object_rate(self) -> float:
        return float(np.mean([e.wrong_object is not None for e in self.episodes]))

    @property
    def timeout_rate(self) -> float:
        return float(np.mean([e.timed_out for e in self.episodes]))

    @property
    def mean_episode_time_s(self) -> float:
        return float(np.mean([e.episode_time_s for e in self.episodes]))

    @property
    def realtime_factor(self) -> float:
        return sum(e.episode_time_s for e in self.episodes) / self.wall_time_s


def run_expert_episode(env: GraspEnv, expert: ScriptedExpert, seed: int) -> EpisodeResult:
    """One episode of ``env`` from ``seed`` with the expert acting until it ends."""
    _, info = env.reset(seed)
    expert.reset(info["task"].target)
    done = False
    while not done:
        _, _, terminated, truncated, info = env.step(expert.act(env.runtime.scene))
        done = terminated or truncated
    state = info["task"]
    return EpisodeResult(seed, state.target, state.instruction, state.success,
                         state.wrong_object, state.timed_out, state.elapsed_s)


def evaluate_expert(episodes: int = 100, seed: int = 0, config: SimConfig | None = None,
                    expert_config: ExpertConfig | None = None) -> ExpertEvaluation:
    """Episodes with seeds ``seed .. seed + episodes - 1`` (chunk shape from ``config``)."""
    config = config or dataclasses.replace(SimConfig(), render_observations=False)
    expert_config = dataclasses.replace(expert_config or ExpertConfig(),
                                        horizon=config.chunk_horizon, dt_s=config.chunk_dt_s)
    with GraspEnv(config) as env:
        expert = ScriptedExpert(env.runtime.scene.model, expert_config)
        t0 = time.perf_counter()
        results = tuple(run_expert_episode(env, expert, seed + i) for i in range(episodes))
        return ExpertEvaluation(results, time.perf_counter() - t0)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    parser.add_argument("--config", default=None, help="sim params file (default: config/sim.yaml)")
    parser.add_argument("--render", action="store_true",
                        help="render the camera and run the RGB-D pipeline every step")
    parser.add_argument("--verbose", action="store_true", help="one line per episode")
    args = parser.parse_args(argv)
    config = load_sim_config(args.config) if args.config else load_sim_config()
    config = dataclasses.replace(config, render_observations=args.render)
    ev = evaluate_expert(args.episodes, args.seed, config)
    if args.verbose:
        for e in ev.episodes:
            outcome = ("success" if e.success else f"wrong object {e.wrong_object}"
                       if e.wrong_object else "timeout")
            print(f"seed {e.seed:5d}  {e.target:16s} {outcome:28s} {e.episode_time_s:5.2f} s  "
                  f"'{e.instruction}'")
    last_seed = args.seed + args.episodes - 1
    print(f"episodes            {len(ev.episodes)} (seeds {args.seed}..{last_seed})")
    print(f"success rate        {ev.success_rate:.3f}")
    print(f"wrong-object rate   {ev.wrong_object_rate:.3f}")
    print(f"timeout rate        {ev.timeout_rate:.3f}")
    print(f"mean episode time   {ev.mean_episode_time_s:.2f} s (sim)")
    print(f"real-time factor    {ev.realtime_factor:.1f}x (wall {ev.wall_time_s:.1f} s"
          f"{', rendering' if args.render else ', no rendering'})")


if __name__ == "__main__":
    main()
