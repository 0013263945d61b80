"""``dpr collect``: scripted-expert demonstrations in simulation."""

from __future__ import annotations

import argparse
import dataclasses


def add_parser(sub) -> None:
    collect = sub.add_parser("collect", help="scripted-expert demonstrations in simulation, "
                             "one rosbag2 (MCAP) per episode")
    collect.add_argument("--episodes", type=int, required=True)
    collect.add_argument("--out", required=True, help="directory for the episode bags")
    collect.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    collect.add_argument("--raw-camera", action="store_true",
                         help="also record the Kinect topics behind each observation")
    collect.add_argument("--pushes", action="store_true",
                         help="push the arm at random during the approach (DART-style "
                         "recoveries, sim/pushes.py)")
    collect.add_argument("--switches", action="store_true",
                         help="start every episode with an instruction for another object "
                         "and switch to its own during the approach (the expert turns)")
    collect.add_argument("--recover-from", metavar="CHECKPOINT",
                         help="DAgger-style: this policy drives first (unrecorded) until a "
                         "random instant or until it starts closing the gripper, then the "
                         "expert takes over and only its corrections are recorded")
    collect.add_argument("--config", help="sim params file (default config/sim.yaml)")
    collect.add_argument("--descriptions", type=float, default=0.0, metavar="SHARE",
                         help="share of episodes (0-1) that ask for the object by shape, "
                         "size and place instead of its colour, where the layout allows")
    collect.add_argument("--object-set", choices=["five", "varied"],
                         help="the scene's objects (default: the params file's object_set): "
                         "varied puts a few of thirteen on the table, colours and shapes "
                         "repeating")
    collect.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.learning.collect import RecoveryConfig, SwitchConfig, collect
    from diffusion_policy_ros.sim.pushes import PushConfig
    from diffusion_policy_ros.sim.sim_config import load_sim_config

    config = load_sim_config(args.config) if args.config else load_sim_config()
    if args.object_set:
        config = dataclasses.replace(config, object_set=args.object_set)
    report = collect(args.episodes, args.out, seed=args.seed, raw_camera=args.raw_camera,
                     config=config, pushes=PushConfig() if args.pushes else None,
                     switches=SwitchConfig() if args.switches else None,
                     recovery=(RecoveryConfig(args.recover_from) if args.recover_from
                               else None), descriptions=args.descriptions)
    print(report.summary())
    return 0
