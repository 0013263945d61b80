"""``dpr sync-demo``: rgbd_sync_node on a synthetic Kinect stream."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    demo = sub.add_parser("sync-demo", help="rgbd_sync_node on a synthetic 30 Hz Kinect stream "
                          "over ROS 2, printing rates, latency and point accuracy")
    demo.add_argument("--seconds", type=float, default=10.0)
    demo.add_argument("--resolution", choices=["1280x720", "640x576"], default="1280x720")
    demo.set_defaults(func=run)



def run(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.ros import sync_demo

    return sync_demo.run(seconds=args.seconds, resolution=args.resolution)
