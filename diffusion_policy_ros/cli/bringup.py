"""``dpr bringup``: the node graph of grasp.launch.py as processes, with episodes."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    up = sub.add_parser("bringup", help="the whole node graph of launch/grasp.launch.py, one "
                        "process per node, for machines without launch; --episodes N runs and "
                        "scores N simulated episodes")
    up.add_argument("--sim", action=argparse.BooleanOptionalAction, default=True,
                    help="start sim_node (default); --no-sim: camera and arm topics come from "
                    "the real drivers")
    up.add_argument("--episodes", type=int, help="run N episodes (reset, wait for the end), "
                    "print success / wrong-object rates, chunk latency and tracker jitter, "
                    "then stop; default: run until Ctrl-C / SIGTERM")
    up.add_argument("--instruction", help="publish this instruction (latched) instead of the "
                    "sim's, at start-up and after each reset")
    up.add_argument("--switch-after", type=float, metavar="S",
                    help="with --episodes: start each episode with another object's "
                    "instruction and publish the episode's own after S s of sim time")
    up.add_argument("--checkpoint", help="policy checkpoint directory (default "
                    "checkpoints/grasp_unet_cd32 in the repository)")
    up.add_argument("--seed", type=int, help="seed of the first measured episode (>= 1; "
                    "default: sim.yaml's seed + 1)")
    up.add_argument("--out", help="write bringup_summary.json and the node logs (logs/) here")
    up.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "npu"],
                    help="policy device (default auto, as grasp.launch.py)")
    up.add_argument("--num-inference-steps", type=int, default=0,
                    help="denoiser calls per chunk (DDIM steps, or consistency steps; default "
                    "0 = the checkpoint's, as grasp.launch.py)")
    up.add_argument("--namespace", default="", help="put every node (and this process's "
                    "topics) into this namespace, as grasp.launch.py namespace:=")
    up.add_argument("--use-sim-time", action="store_true", help="sim_node publishes /clock "
                    "and every node runs on it, as grasp.launch.py use_sim_time:=true")
    up.add_argument("--rviz", action="store_true", help="also start robot_state_publisher "
                    "(the package's URDF) and rviz2 with config/grasp.rviz (needs a ROS 2 "
                    "install with rviz2)")
    up.add_argument("--latency-stages", action="store_true",
                    help="also measure the stamp -> chunk latency hop by hop (frame, sync, "
                    "policy, delivery) from the publication times of camera_info and "
                    "observation/points; two more readers in the graph, which on two cores "
                    "lengthen the latency they split (docs/reference/nodes.md)")
    up.add_argument("--ready-timeout", type=float, default=180.0,
                    help="seconds to wait for the nodes and the first action chunk")
    up.add_argument("--params-file", action="append", default=[], metavar="FILE",
                    help="your parameter file (ROS 2 --params-file layout, '/**/<node>:' keys "
                    "as in config/*.yaml), given to every node after its config/<node>.yaml "
                    "and dpr bringup's defaults, which it overrides; the options you give "
                    "and the --*-param overrides override it (repeatable, later files win)")
    up.add_argument("--max-restarts", type=int, default=3, metavar="N",
                    help="restart a dead rgbd_sync_node or policy_node at most N times in a "
                    "row (after 1, 2, 4, ... s; a node that ran 60 s starts a new row), "
                    "then end the run; the exit of any other node ends it at once; 0: any "
                    "node's exit ends the run (default 3)")
    for flag, node in (("sim", "sim_node"), ("sync", "rgbd_sync_node"),
                       ("policy", "policy_node"), ("tracker", "pd_tracker_node")):
        up.add_argument(f"--{flag}-param", action="append", default=[], metavar="KEY:=VALUE",
                        help=f"{node} parameter override, as ros2 run -p (repeatable)")
    up.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.ros.bringup.options import Options
    from diffusion_policy_ros.ros.bringup.runner import run as run_bringup

    return run_bringup(Options(
        sim=args.sim, episodes=args.episodes, instruction=args.instruction,
        switch_after_s=args.switch_after, checkpoint=args.checkpoint, seed=args.seed,
        out=args.out, device=args.device,
        num_inference_steps=args.num_inference_steps, ready_timeout_s=args.ready_timeout,
        namespace=args.namespace, use_sim_time=args.use_sim_time, rviz=args.rviz,
        latency_stages=args.latency_stages, params_files=args.params_file,
        max_restarts=args.max_restarts, sim_params=args.sim_param, sync_params=args.sync_param,
        policy_params=args.policy_param, tracker_params=args.tracker_param))
