"""A node's ROS clock on ``/clock`` without its executor (rclcpp's ``use_clock_thread``).

Under ``use_sim_time`` rclpy's ``TimeSource`` subscribes to ``/clock`` through the
node's executor: each message (``sim_node`` publishes 100 per sim second) costs that
executor a rebuild of its wait set of every entity of the node and a dispatch through
its task machinery, several times what a thread waiting on the ``/clock`` reader alone
costs (docs/explanation/distillation.md measures both). Each reader also costs the publisher a
delivery.

``ClockThread`` replaces the ``TimeSource``'s subscription by a ``WaitedSubscription``
on a thread of its own that sets the node's clock as the ``TimeSource`` does
(``ROSClock.set_ros_time_override``; timers on that clock still fire through rcl's
time-jump callbacks). ``drop_time_source_subscription`` alone is for a node that sets
its clock itself: ``sim_node``, the clock's source, and the bringup commander, which
reads ``/clock`` for its own purpose. Setting ``use_sim_time`` at run time stays the
``TimeSource``'s business: it subscribes again when the parameter turns true.
"""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.clock import ROSClock
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.time import Time
from rosgraph_msgs.msg import Clock

from diffusion_policy_ros.ros.polled import WaitedSubscription
from diffusion_policy_ros.ros.realtime import MessageDrivenThread

CLOCK_TOPIC = "/clock"
#: rclpy's and rclcpp's: the newest time is all a clock needs.
CLOCK_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)


def ros_clock(node: Node) -> ROSClock:
    """The node's clock, a ``ROSClock`` (``Node.get_clock`` says only ``Clock``)."""
    clock = node.get_clock()
    assert isinstance(clock, ROSClock), type(clock)
    return clock


def drop_time_source_subscription(node: Node) -> bool:
    """Destroy the ``/clock`` subscription rclpy's ``TimeSource`` made for ``node`` (call
    it before the node subscribes to ``/clock`` itself); True when there was one. The
    node's clock then stands still unless its owner sets it."""
    dropped = False
    for subscription in list(node.subscriptions):
        if subscription.topic_name == CLOCK_TOPIC and subscription.msg_type is Clock:
            dropped = node.destroy_subscription(subscription) or dropped
    return dropped


class ClockThread:
    """Follows ``/clock`` for ``node`` on a thread of its own when the node is on sim
    time (``following``); otherwise does nothing. ``stop`` before destroying the node."""

    def __init__(self, node: Node):
        self._clock = ros_clock(node)
        self.following = (self._clock.ros_time_is_active
                          and drop_time_source_subscription(node))
        self._source: WaitedSubscription | None = None
        self._thread: MessageDrivenThread | None = None
        if not self.following:
            return
        self._source = WaitedSubscription(node, Clock, CLOCK_TOPIC, CLOCK_QOS)
        self._thread = MessageDrivenThread(self._source, self._on_clock, 0, "ros_clock",
                                           idle_wait_s=1.0)
        self._thread.start()

    def _on_clock(self, msg: Clock) -> None:
        self._clock.set_ros_time_override(Time.from_msg(msg.clock))

    @property
    def problem(self) -> str:
        """'' while the thread follows ``/clock`` (or the node is not on sim time); else
        why it stopped."""
        failure = self._thread.failure if self._thread is not None else None
        if failure is None:
            return ""
        return (f"/clock no longer followed ({type(failure).__name__}: {failure}): this "
                f"node's clock stands still")

    def report(self, status: DiagnosticStatus) -> None:
        """Turn the node's health report into an ERROR saying so once the thread stopped."""
        if problem := self.problem:
            status.level, status.message = DiagnosticStatus.ERROR, problem

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
            if self._source is not None:
                self._source.destroy()
            self._thread = None
