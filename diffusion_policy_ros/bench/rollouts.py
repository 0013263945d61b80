"""``dpr bench rollouts``: env steps per second of ``dpr finetune``'s rollouts for N envs.

The shipped policy (or ``--checkpoint``) acts batched over N ``GraspRlEnv`` worker
processes, with the exploration of ``config/finetune.yaml``, exactly as in an
iteration of ``dpr finetune`` (rendering, the RGB-D pipeline, the policy, the value
network and the reference policy's mean included). The first collection of each N
is a warm-up; the table gives the median of the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence

import numpy as np
import torch

from diffusion_policy_ros.bench.json_report import write_json
from diffusion_policy_ros.config import SHIPPED_CHECKPOINT
from diffusion_policy_ros.learning.finetune import RolloutCollector
from diffusion_policy_ros.learning.finetune_config import load_finetune_config
from diffusion_policy_ros.learning.ppo_policy import DiffusionActorCritic, ValueNetwork
from diffusion_policy_ros.policy.checkpoint import load_checkpoint


def measure(checkpoint, num_envs: int, steps_per_env: int, repeats: int) -> dict:
    config = dataclasses.replace(load_finetune_config(), num_envs=num_envs,
                                 steps_per_env=steps_per_env, vector_env="async")
    policy, _ = load_checkpoint(checkpoint)
    reference, _ = load_checkpoint(checkpoint)
    ac = DiffusionActorCritic(policy, ValueNetwork(policy.config.cond_dim,
                                                   policy.config.state_dim))
    collector = RolloutCollector(ac, reference, config, torch.device("cpu"), "fp32", 0, 1)
    rates = []
    try:
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            _, episodes = collector.collect(config.std_start, joint=False)
            steps = sum(e.steps for e in episodes)
            if i:
                rates.append(steps / (time.perf_counter() - t0))
    finally:
        collector.close()
    return {"envs": num_envs, "env_steps_per_s_p50": float(np.median(rates)),
            "collections": repeats, "steps_per_env": steps_per_env}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(SHIPPED_CHECKPOINT))
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps-per-env", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the learner")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [measure(args.checkpoint, n, args.steps_per_env, args.repeats) for n in args.envs]
    print(f"rollouts of {args.checkpoint}: median env steps/s over {args.repeats} "
          f"collections of >= {args.steps_per_env} steps per env (whole episodes)")
    for r in rows:
        print(f"  {r['envs']:>3} envs: {r['env_steps_per_s_p50']:7.1f} env steps/s")
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
