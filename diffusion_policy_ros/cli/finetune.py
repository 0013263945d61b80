"""``dpr finetune``: PPO fine-tuning in simulation."""

from __future__ import annotations

import argparse

from diffusion_policy_ros.config import CONFIG_DIR, SHIPPED_CHECKPOINT


def add_parser(sub) -> None:
    tune = sub.add_parser("finetune", help="PPO fine-tuning of a policy in simulation "
                          "(vectorised envs; torchrun for several processes or machines)")
    tune.add_argument("--init", default=str(SHIPPED_CHECKPOINT),
                      help="checkpoint to start from (default: the shipped policy)")
    tune.add_argument("--out", required=True, help="run directory (checkpoint/, log.jsonl, "
                      "tb/, learning_curve.png, training_state.*)")
    tune.add_argument("--finetune-config", help="settings YAML (default config/finetune.yaml)")
    tune.add_argument("--iterations", type=int)
    tune.add_argument("--num-envs", type=int, help="simulations per process")
    tune.add_argument("--steps-per-env", type=int, help="control steps per env and iteration")
    tune.add_argument("--depth-noise", action="store_true", help="train with the Kinect's "
                      "time-of-flight depth noise")
    tune.add_argument("--switch-probability", type=float, help="share of episodes with an "
                      "instruction switch after 1 s")
    tune.add_argument("--replay-failures", metavar="REPORT", help="a dpr eval --report JSON "
                      "of training seeds (e.g. --seed 200000): its failed seeds are replayed")
    tune.add_argument("--replay-probability", type=float, help="share of episodes drawn "
                      "from those failures (default 0.5 with --replay-failures)")
    tune.add_argument("--max-minutes", type=float)
    tune.add_argument("--frozen-iterations", type=int, help="iterations with the encoders "
                      "frozen; the joint stage (encoders and fusion trained too) follows")
    tune.add_argument("--threads", type=int, help="torch intra-op threads of the learner's "
                      "rollouts")
    tune.add_argument("--update-threads", type=int, help="torch intra-op threads of the "
                      "update (0: the machine's cores shared among its ranks)")
    tune.add_argument("--device", choices=["auto", "cpu", "cuda", "npu"])
    tune.add_argument("--resume", action="store_true", help="continue the run in --out from "
                      "its last checkpoint, exactly")
    tune.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.learning.finetune import finetune
    from diffusion_policy_ros.learning.finetune_config import load_finetune_config

    overrides = {"iterations": args.iterations, "num_envs": args.num_envs,
                 "steps_per_env": args.steps_per_env, "max_minutes": args.max_minutes,
                 "device": args.device, "num_threads": args.threads,
                 "update_threads": args.update_threads,
                 "frozen_iterations": args.frozen_iterations,
                 "depth_noise": True if args.depth_noise else None,
                 "switch_probability": args.switch_probability,
                 "replay_report": args.replay_failures,
                 "replay_probability": (0.5 if args.replay_failures
                                        and args.replay_probability is None
                                        else args.replay_probability)}
    config = load_finetune_config(args.finetune_config or CONFIG_DIR / "finetune.yaml",
                                  overrides)
    path = finetune(args.init, config, args.out, resume=args.resume)
    print(f"checkpoint: {path}")
    return 0
