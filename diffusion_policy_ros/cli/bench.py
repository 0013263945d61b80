"""``dpr bench``: every benchmark that prints its figures, one subcommand each.

The benchmarks are the modules of ``diffusion_policy_ros.bench`` (its docstring lists
which subcommand runs which module).
"""

from __future__ import annotations

import argparse
import json

from diffusion_policy_ros.cli.passthrough import add_module_command, run_module

TRACKER_LOADS = ("none", "policy", "saturated")
"""``bench.tracker_loop.LOADS``, named here so that parsing arguments does not import rclpy."""


def add_parser(sub) -> None:
    bench = sub.add_parser("bench", help="benchmarks that print their figures")
    bench_sub = bench.add_subparsers(dest="target", required=True)
    perception = bench_sub.add_parser("perception", help="RGB-D pipeline vs open3d per frame")
    perception.add_argument("--frames", type=int, default=100, help="frames timed per row")
    perception.add_argument("--json", help="also write the rows to this JSON file")
    perception.set_defaults(func=_perception)

    tracker = bench_sub.add_parser("tracker", help="pd_tracker_node loop timing at 500 Hz and "
                                   "1 kHz, with and without a policy-sized CPU load")
    tracker.add_argument("--seconds", type=float, default=10.0, help="per configuration")
    tracker.add_argument("--priorities", type=int, nargs="+", default=[0, 50],
                         help="realtime_priority values to compare (0 = normal scheduling)")
    tracker.add_argument("--rates", type=float, nargs="+", default=[500.0, 1000.0],
                         help="control rates (Hz)")
    tracker.add_argument("--loads", nargs="+", default=list(TRACKER_LOADS),
                         choices=TRACKER_LOADS, help="CPU loads next to the node")
    tracker.add_argument("--json", help="also write the rows to this JSON file")
    tracker.set_defaults(func=_tracker)

    blending = bench_sub.add_parser("blending", help="chunk blending strategies on a seeded "
                                    "latency-jittered stream: tracking error and jerk")
    blending.set_defaults(func=lambda args: run_module("diffusion_policy_ros.bench.blending"))
    for name, help_text, module in (
            ("policy", "per-stage policy latency (U-Net and DiT, DDIM 100 and 10); options "
             "as python -m diffusion_policy_ros.bench.policy_stages", "policy_stages"),
            ("lightdp", "real-time candidates in one table: chunk latency (1 and 2 threads, "
             "interleaved), speed-up over the reference, eval figures "
             "(config/bench_lightdp.yaml)", "lightdp"),
            ("tracking", "tracker on the simulated arm, expert chunks 50-150 ms late: "
             "success, error, jerk per blend strategy (--episodes N)", "sim_tracking"),
            ("activations", "the policy's one-exp Mish vs torch's, eager and compiled "
             "(median us, speed-up, error)", "activations"),
            ("aot", "how dpr export compiles its AOTInductor packages: the PointNet "
             "pooling's form, GEMM autotuning per graph (median ms, speed-up, max "
             "difference; a few minutes)", "aot_graphs"),
            ("gae", "GAE over a whole rollout at once vs the Python loop (median ms, "
             "speed-up, max difference)", "gae"),
            ("rollouts", "dpr finetune's rollout throughput (env steps/s) for N envs "
             "(--envs 1 2)", "rollouts"),
            ("lift-path", "the stalled-grasp lift's path solve, batched vs point by point "
             "(median ms, speed-up, pose errors)", "lift_path"),
            ("frozen-subscriber", "a joint_states subscriber frozen and resumed N times next "
             "to sim_node and the tracker: sim publish stalls, tracker faults, with the "
             "package's Fast DDS profiles vs shared memory", "frozen_subscriber"),
            ("loaded-startup", "sim_node started N times next to CPU burners with a "
             "test-like subscriber: exits, refused publishes, how late its reports arrive",
             "loaded_startup")):
        add_module_command(bench_sub, name, help_text, f"diffusion_policy_ros.bench.{module}")
    tick = bench_sub.add_parser("tick", help="PdTracker tick and submit_chunk time (no ROS)")
    tick.set_defaults(func=lambda args: run_module("diffusion_policy_ros.bench.tracker_tick"))


def _perception(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.bench import perception

    rows = perception.run(frames=args.frames)
    print(perception.format_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
    return 0


def _tracker(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.bench import tracker_loop

    return tracker_loop.run(seconds=args.seconds, priorities=tuple(args.priorities),
                            rates_hz=tuple(args.rates), loads=tuple(args.loads),
                            json_path=args.json)
