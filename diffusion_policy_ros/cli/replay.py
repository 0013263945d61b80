"""``dpr replay``: perception + policy over a recorded bag, or the bag played over ROS."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    rep = sub.add_parser("replay", help="run perception + policy offline over a recorded "
                         "rosbag2 and score it against the recorded actions (report.json + "
                         "plots)")
    rep.add_argument("--bag", required=True, help="rosbag2 directory (sqlite3 or MCAP) from dpr "
                     "collect or ros2 bag record (raw Kinect topics + joint_states + "
                     "instruction)")
    rep.add_argument("--checkpoint", help="policy checkpoint directory (default "
                     "checkpoints/grasp_unet_cd32 in the repository)")
    rep.add_argument("--report", help="report directory (default <bag>_replay)")
    rep.add_argument("--force", action="store_true", help="overwrite an existing report")
    rep.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda", "npu"])
    rep.add_argument("--steps", type=int, help="DDIM steps (default: the checkpoint's)")
    rep.add_argument("--seed", type=int, default=0, help="noise seed of the first chunk")
    rep.add_argument("--period", type=float, help="seconds between policy queries (default: "
                     "the checkpoint's action_dt_s; 0: every observation)")
    rep.add_argument("--gripper-open", type=float, default=0.04,
                     help="opening (m) above which the gripper counts as open")
    rep.add_argument("--publish", action="store_true", help="instead of a report: play the "
                     "bag into ROS topics as raw CDR with /clock from the bag time (as ros2 bag "
                     "play), for nodes run with use_sim_time")
    rep.add_argument("--rate", type=float, default=1.0, help="--publish: playback speed factor")
    rep.add_argument("--clock", action=argparse.BooleanOptionalAction, default=True,
                     help="--publish: publish /clock from the bag time (default on)")
    rep.add_argument("--clock-hz", type=float, default=100.0,
                     help="--publish: /clock rate between messages (0: only with messages)")
    rep.add_argument("--wait", type=float, default=2.0, help="--publish: seconds to wait for a "
                     "subscriber on every topic before playing")
    rep.add_argument("--topics", nargs="+", help="--publish: play only these topics")
    rep.add_argument("--namespace", default="", help="--publish: namespace for relative topic "
                     "names")
    rep.add_argument("--wait-active", nargs="+", default=[], metavar="NODE",
                     help="--publish: also wait (up to --wait s) until these lifecycle nodes "
                     "are active, e.g. policy_node")
    rep.add_argument("--report-topics", nargs="+", default=[], metavar="TOPIC",
                     help="--publish: count the messages on these topics while playing and "
                     "report them, e.g. policy/action_chunk")
    rep.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.publish:
        from diffusion_policy_ros.ros import bag_player

        return bag_player.run(bag_player.PlayOptions(
            bag=args.bag, rate=args.rate, clock=args.clock, clock_hz=args.clock_hz,
            wait_s=args.wait, topics=args.topics, namespace=args.namespace,
            wait_active=args.wait_active, report_topics=args.report_topics))
    from diffusion_policy_ros.learning.replay import (
        ReplayOptions,
        replay,
        summary_text,
    )

    options = ReplayOptions(bag=args.bag, checkpoint=args.checkpoint, report_dir=args.report,
                            force=args.force, device=args.device,
                            num_inference_steps=args.steps, seed=args.seed,
                            period_s=args.period, gripper_open_m=args.gripper_open,
                            progress=True)
    result = replay(options)
    print(summary_text(result.report))
    print(f"report: {result.report_dir}")
    return 0
