"""Run scored grasp episodes on a graph that is already running, from a plain Python script.

Start the graph first, in another terminal, with the simulation waiting for instructions
and starting episodes only when asked::

    ros2 launch diffusion_policy_ros grasp.launch.py          # or:
    .venv/bin/dpr bringup --sim-param auto_reset:=false --sim-param publish_instruction:=false

then::

    .venv/bin/python examples/grasp_episodes.py "pick up the red cube" "grasp the green cube"

Each instruction gets one episode (``sim_node/reset``, the instruction, the end on
``sim/episode``); the script prints the outcome and the chunk latency of each.
"""

import argparse
import sys

from diffusion_policy_ros.ros.bringup.commander import CommanderStopped, GraspCommander


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instructions", nargs="+", help="one episode per instruction")
    parser.add_argument("--namespace", default="", help="the graph's namespace")
    parser.add_argument("--use-sim-time", action="store_true", help="the graph runs on /clock")
    parser.add_argument("--ready-timeout", type=float, default=180.0, help="seconds")
    args = parser.parse_args()
    with GraspCommander(namespace=args.namespace, use_sim_time=args.use_sim_time) as commander:
        commander.instruct(args.instructions[0])  # a waiting policy starts on it
        if not commander.wait_until_ready(timeout_s=args.ready_timeout):
            print(f"graph not ready: {commander.not_ready_reason()}", file=sys.stderr)
            return 1
        try:
            for text in args.instructions:
                record = commander.run_episode(text)
                latency = record["chunk_latency_ms"]
                print(f"'{text}' -> {record['target']}: {record['status']} after "
                      f"{record['elapsed_s']:.1f} s ({record['chunks']} chunks, latency p50 "
                      f"{latency['p50']} ms)")
        except CommanderStopped as exc:
            print(f"stopped: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
