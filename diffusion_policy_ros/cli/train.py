"""``dpr train``: the diffusion policy from episode bags."""

from __future__ import annotations

import argparse
import dataclasses


def add_parser(sub) -> None:
    train = sub.add_parser("train", help="train the diffusion policy from episode bags "
                           "(run under torchrun for data parallel)")
    train.add_argument("--data", required=True, nargs="+",
                       help="directory (or directories) of episode_* bags")
    train.add_argument("--config", required=True, help="policy config, e.g. "
                       "config/policy_unet.yaml")
    train.add_argument("--out", required=True, help="run directory (log, checkpoint)")
    train.add_argument("--train-config", help="optimisation settings (config/train.yaml)")
    train.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="replace a policy config field (repeatable), e.g. "
                       "--set tool_relative_target=false")
    train.add_argument("--steps", type=int)
    train.add_argument("--batch-size", type=int)
    train.add_argument("--max-minutes", type=float)
    train.add_argument("--device", choices=["auto", "cpu", "cuda", "npu"])
    train.add_argument("--resume", action="store_true", help="continue the run in --out")
    train.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.learning.train import train
    from diffusion_policy_ros.learning.train_config import load_train_config
    from diffusion_policy_ros.policy.configuration_diffusion import load_policy_config

    config = load_train_config(args.train_config) if args.train_config else load_train_config()
    policy_config = load_policy_config(args.config, args.set)
    overrides = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size),
                                   ("max_minutes", args.max_minutes), ("device", args.device))
                 if v is not None}
    config = dataclasses.replace(config, **overrides)
    path = train(args.data, policy_config, config, args.out, resume=args.resume)
    print(f"checkpoint: {path}")
    return 0
