"""Publishers and subscriptions without rclpy's default QoS event handlers.

By default rclpy gives every publisher and subscription two event handlers
(incompatible QoS, incompatible type) that only log. Each is a waitable that
rclpy's executor enters, counts, adds to its wait set and checks again in
Python on every ``spin_once``, so a node with a dozen endpoints pays for two
dozen of them on each of its hundreds of wake-ups per second: on the 500 Hz
lockstep of the simulated arm that is much of the loop's CPU and latency
(measured with ``dpr bringup``'s CPU line, docs/explanation/distillation.md).

``LeanEventsMixin`` (before ``Node`` / ``LifecycleNode`` in the bases) keeps
one handler per subscription, which warns when a publisher offers QoS that
this subscription cannot take: that mismatch is what leaves a node without
data. Publishers get none: the subscriber side reports the same mismatch
(rclpy, rclcpp and rviz subscriptions do by default). Explicit
``event_callbacks`` are used as given.
"""

from __future__ import annotations

from typing import Protocol

from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
from rclpy.impl.rcutils_logger import RcutilsLogger
from rclpy.node import Node
from rclpy.qos import qos_policy_name_from_kind


class _Logging(Protocol):
    def get_logger(self) -> RcutilsLogger: ...


class LeanEventsMixin:
    """``create_publisher`` / ``create_lifecycle_publisher`` / ``create_subscription``
    with the lean event handlers described in the module docstring."""

    def create_publisher(self, *args, event_callbacks=None, **kwargs):
        return super().create_publisher(
            *args, event_callbacks=event_callbacks or PublisherEventCallbacks(
                use_default_callbacks=False), **kwargs)

    def create_lifecycle_publisher(self, *args, event_callbacks=None, **kwargs):
        return super().create_lifecycle_publisher(
            *args, event_callbacks=event_callbacks or PublisherEventCallbacks(
                use_default_callbacks=False), **kwargs)

    def create_subscription(self, msg_type, topic, *args, event_callbacks=None, **kwargs):
        if event_callbacks is None:
            event_callbacks = SubscriptionEventCallbacks(
                incompatible_qos=lambda event: self._warn_incompatible_qos(topic, event),
                use_default_callbacks=False)
        return super().create_subscription(msg_type, topic, *args,
                                           event_callbacks=event_callbacks, **kwargs)

    def _warn_incompatible_qos(self: _Logging, topic: str, event) -> None:
        self.get_logger().warning(
            f"a publisher on '{topic}' offers QoS this subscription cannot take: no messages "
            f"from it (last incompatible policy: "
            f"{qos_policy_name_from_kind(event.last_policy_kind)}; {event.total_count} so far)")


class LeanNode(LeanEventsMixin, Node):
    """A plain ``Node`` with the lean event handlers (``rclpy.create_node``'s arguments)."""
