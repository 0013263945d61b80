"""A publish the middleware refuses is a counted, logged drop, not an exception.

rclpy raises ``RCLError`` ("cannot publish data") when the middleware refuses a
sample. Fast DDS refuses one when a reliable writer's history is full and its oldest
sample cannot be released within the reliability QoS's ``max_blocking_time``
(100 ms by default), e.g. while a CPU-starved process's reliable reader is still
being served: next to CPU burners ``sim_node``'s ``joint_states`` publish raised and
the node exited (docs/explanation/safety.md, "A refused publish"). One lost sample is what a
best-effort reader sees anyway and the next follows a period later; a node that exits
instead stops the loop for everyone. A publish that fails because the node's context
is shutting down (a loop or render thread finishing its turn after SIGTERM) is neither
counted nor logged. Programming errors (a wrong message type) still raise.
"""

from __future__ import annotations

import time

from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

from diffusion_policy_ros.monitoring import ThrottledReasons

#: What rclpy raises when ``rcl_publish`` fails.
PublishRefused = _rclpy.RCLError


class PublishGuard:
    """Publishes for one node; counts refused samples per topic and logs each topic's
    at most once per ``log_period_s``. ``context``: the node's, to tell a shutdown apart."""

    def __init__(self, logger, context=None, log_period_s: float = 2.0):
        self._logger = logger
        self._context = context
        self.refused = ThrottledReasons(period_s=log_period_s)

    def publish(self, publisher, msg) -> bool:
        """``publisher.publish(msg)``; False (counted, logged) when the middleware refused it."""
        try:
            publisher.publish(msg)
        except PublishRefused as exc:
            if self._context is not None and not self._context.ok():
                return False
            topic = publisher.topic_name
            if self.refused.record(topic, time.monotonic()):
                self._logger.error(
                    f"publishing on {topic} failed, sample dropped ({exc}) "
                    f"[{self.refused.counts[topic]} so far on {topic}]")
            return False
        return True

    @property
    def refused_total(self) -> int:
        """Samples refused on every topic since the start."""
        return sum(self.refused.counts.values())
