"""LeanEventsMixin: one QoS event handler per subscription, none per publisher (real DDS)."""

import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from diffusion_policy_ros.ros.lean_events import LeanEventsMixin


class _LeanNode(LeanEventsMixin, Node):
    def __init__(self, context):
        super().__init__("lean_events_test", context=context)
        self.warnings = []

    def _warn_incompatible_qos(self, topic, event):
        self.warnings.append((topic, event.total_count))
        super()._warn_incompatible_qos(topic, event)


def test_only_subscriptions_watch_for_incompatible_qos_and_they_warn(ros):
    node = _LeanNode(ros.context)
    ros.executor.add_node(node)
    try:
        baseline = len(list(node.waitables))  # the node's own (parameter events publisher)
        for k in range(3):
            node.create_publisher(String, f"lean_out_{k}", 10)
        node.create_subscription(String, "lean_in", lambda m: None, QoSProfile(depth=10))
        assert len(list(node.waitables)) == baseline + 1
        # A best-effort publisher cannot feed a reliable subscription: the event fires.
        ros.node.create_publisher(
            String, "lean_in", QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
        ros.spin_until(lambda: node.warnings, 15.0, "the incompatible-QoS warning")
        assert node.warnings[0][0] == "lean_in"
    finally:
        ros.executor.remove_node(node)
        node.destroy_node()
    assert rclpy.ok(context=ros.context)
