"""``dpr``: the offline command line of diffusion_policy_ros."""

from __future__ import annotations

import argparse
import importlib
import json
import sys


def _run_main(module: str, argv: list[str] | None = None) -> int:
    main = importlib.import_module(module).main
    if argv is None:
        main()
    else:
        main(argv)
    return 0


def _bench_perception(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.perception import benchmark

    rows = benchmark.run(frames=args.frames)
    print(benchmark.format_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
    return 0


def _bench_tracker(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.ros import tracker_bench

    return tracker_bench.run(seconds=args.seconds)


def _sync_demo(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.ros import sync_demo

    return sync_demo.run(seconds=args.seconds, resolution=args.resolution)


def _collect(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.learning.collect import collect
    from diffusion_policy_ros.sim.sim_config import load_sim_config

    config = load_sim_config(args.config) if args.config else None
    try:
        report = collect(args.episodes, args.out, seed=args.seed, raw_camera=args.raw_camera,
                         config=config)
    except FileExistsError as exc:
        print(f"dpr collect: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpr", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    collect = sub.add_parser("collect", help="scripted-expert demonstrations in simulation, "
                             "one rosbag2 (MCAP) per episode")
    collect.add_argument("--episodes", type=int, required=True)
    collect.add_argument("--out", required=True, help="directory for the episode bags")
    collect.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    collect.add_argument("--raw-camera", action="store_true",
                         help="also record the Kinect topics behind each observation")
    collect.add_argument("--config", help="sim params file (default config/sim.yaml)")
    collect.set_defaults(func=_collect)

    expert = sub.add_parser("eval-expert", help="scripted expert success rate and speed",
                            add_help=False)
    expert.set_defaults(func=lambda args: _run_main("diffusion_policy_ros.sim.expert_eval",
                                                    args.rest))
    expert.add_argument("rest", nargs=argparse.REMAINDER)

    bench = sub.add_parser("bench", help="benchmarks that print their figures")
    bench_sub = bench.add_subparsers(dest="target", required=True)
    perception = bench_sub.add_parser("perception", help="RGB-D pipeline vs open3d per frame")
    perception.add_argument("--frames", type=int, default=100, help="frames timed per row")
    perception.add_argument("--json", help="also write the rows to this JSON file")
    perception.set_defaults(func=_bench_perception)

    tracker = bench_sub.add_parser("tracker", help="pd_tracker_node loop timing at 500 Hz and "
                                   "1 kHz, with and without a policy-sized CPU load")
    tracker.add_argument("--seconds", type=float, default=10.0, help="per configuration")
    tracker.set_defaults(func=_bench_tracker)

    blending = bench_sub.add_parser("blending", help="chunk blending strategies on a seeded "
                                    "latency-jittered stream: tracking error and jerk")
    blending.set_defaults(func=lambda args: _run_main("diffusion_policy_ros.control.blending"))
    tick = bench_sub.add_parser("tick", help="PdTracker tick and submit_chunk time (no ROS)")
    tick.set_defaults(func=lambda args: _run_main("diffusion_policy_ros.control.benchmark"))

    demo = sub.add_parser("sync-demo", help="rgbd_sync_node on a synthetic 30 Hz Kinect stream "
                          "over ROS 2, printing rates, latency and point accuracy")
    demo.add_argument("--seconds", type=float, default=10.0)
    demo.add_argument("--resolution", choices=["1280x720", "640x576"], default="1280x720")
    demo.set_defaults(func=_sync_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
