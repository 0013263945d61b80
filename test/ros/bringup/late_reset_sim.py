"""A stand-in for ``sim_node``'s episode interface whose reset reply comes late.

``sim_node/reset`` reports the new episode on ``sim/episode`` at once, as sim_node does,
and then holds its reply for ``HOLD_S`` (argv[1]) seconds: what a commander sees when the
middleware loses the reply and repairs it at a later heartbeat. Run as a script by
``test_commander.py``; stopped by PID.
"""

import json
import sys
import time

import rclpy
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from rclpy.signals import SignalHandlerOptions
from std_msgs.msg import String
from std_srvs.srv import Trigger


class LateResetSim(Node):
    def __init__(self, hold_s: float):
        super().__init__("sim_node")
        self.hold_s = hold_s
        self.episode = 0
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.episode_pub = self.create_publisher(String, "sim/episode", latched)
        self.create_service(Trigger, "sim_node/reset", self._on_reset)

    def _on_reset(self, request, response):
        self.episode += 1
        self.episode_pub.publish(String(data=json.dumps(
            {"episode": self.episode, "seed": 7, "status": "running"})))
        time.sleep(self.hold_s)  # ok-sleep: the held reply is what this stand-in models
        response.success = True
        response.message = f"episode {self.episode} seed 7: "
        return response


def main() -> None:
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)  # SIGTERM ends it at once
    node = LateResetSim(float(sys.argv[1]))
    rclpy.spin(node)


if __name__ == "__main__":
    main()
