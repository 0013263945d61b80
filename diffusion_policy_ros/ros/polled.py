"""Subscriptions the executor never wakes for: their owner takes the messages when it needs them.

rclpy's executor runs a Python wait-set rebuild and task dispatch for every
message it delivers, whatever the callback does. On a 500 Hz topic that a node
only reads in batches (``policy_node`` pairs joint_states with camera frames at
30 Hz; the episode recorder keeps 50 Hz of them) that dispatch is most of the
node's CPU, and on a 2-core machine running the whole graph it is CPU the
simulation and the tracker need (``dpr bringup`` prints each process's CPU per
sim second; docs/explanation/distillation.md has the figures before and after).

A ``PolledSubscription`` is an ordinary DDS reader with a KEEP_LAST queue: the
middleware keeps the newest ``depth`` messages, and ``take_all`` / ``take_latest``
read them in one call. It sits in a callback group the executor never runs, so
the executor leaves it out of its wait set; for the same reason its QoS event
handlers would never run either, so it has none (an incompatible publisher shows
up as no messages, which the owner reports as missing or stale data, and
``incompatible_publishers`` finds such publishers in the ROS graph). Not a QoS event
handler in a group the executor runs: that handler shares the reader's
wake-up, so every message woke the executor, which then spun until the message was
taken (about 5 ms of CPU per message in a scratch check).

A ``WaitedSubscription`` is a polled subscription that a thread of its own blocks
on: a wait set holding just it and a wake-up guard condition, rebuilt per wait in a
few microseconds, where the executor rebuilds one of every entity of the node
(parameter services, timers, each QoS event) and dispatches through tasks and
callback groups. ``pd_tracker_node`` runs its law that way on each ``joint_states``
under sim time, once per 2 ms simulated step. ``WaitedSubscriptions`` is the same for
the topics of one stream that a thread serves together (``rgbd_sync_node``'s camera
topics, ``policy_node``'s observation): the message is handled as soon as it is
queued, where an executor came to it about 2 ms later on the busy 2-core machine
(docs/explanation/distillation.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence

from rclpy.callback_groups import CallbackGroup
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.guard_condition import GuardCondition
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy


class _NeverExecuted(CallbackGroup):
    """A callback group whose entities the executor neither waits on nor runs."""

    def can_execute(self, entity) -> bool:
        return False

    def beginning_execution(self, entity) -> bool:
        return False

    def ending_execution(self, entity) -> None:
        pass


def _not_called(_msg) -> None:
    raise AssertionError("a polled subscription's callback is never run by the executor")


class PolledSubscription:
    """A subscription read with ``take_all`` / ``take_latest`` instead of a callback."""

    def __init__(self, node: Node, msg_type, topic: str, qos: QoSProfile):
        self.msg_type = msg_type
        self.qos = qos
        self.subscription = node.create_subscription(
            msg_type, topic, _not_called, qos, callback_group=_NeverExecuted(),
            event_callbacks=SubscriptionEventCallbacks(use_default_callbacks=False))
        self.taken_total = 0

    def take_all(self) -> list:
        """Every queued message, oldest first (at most the QoS depth since the last take)."""
        messages = []
        handle = self.subscription.handle
        with handle:
            while (taken := handle.take_message(self.msg_type, False)) is not None:
                messages.append(taken[0])
        self.taken_total += len(messages)
        return messages

    def take_latest(self):
        """The newest queued message (older ones are discarded), or None."""
        messages = self.take_all()
        return messages[-1] if messages else None


class _Waiter:
    """A wait set of some subscriptions and a wake-up guard condition, rebuilt per wait.

    The wait set is rclpy's own (the C extension the executors use); the guard
    condition is not the node's, so the executor never waits on it either.
    """

    def __init__(self, node: Node, subscriptions: Sequence[PolledSubscription]):
        self._wake = GuardCondition(None, None, context=node.context)
        # Taken once: the tracker waits through here 500 times a second.
        self._subscriptions = [s.subscription.handle for s in subscriptions]
        context = node.context.handle
        assert context is not None, "the node's context is shut down"
        self._wake_handle, self._context = self._wake.handle, context
        self._held = (*self._subscriptions, self._wake_handle, context)

    def wait(self, timeout_s: float) -> None:
        wake, context = self._wake_handle, self._context
        with contextlib.ExitStack() as held:
            for handle in self._held:
                held.enter_context(handle)
            wait_set = _rclpy.WaitSet(len(self._subscriptions), 1, 0, 0, 0, 0, context)
            for handle in self._subscriptions:
                wait_set.add_subscription(handle)
            wait_set.add_guard_condition(wake)
            wait_set.wait(int(timeout_s * 1e9))

    def wake(self) -> None:
        self._wake.trigger()

    def destroy(self) -> None:
        self._wake.destroy()


class WaitedSubscription(PolledSubscription):
    """A polled subscription whose owner's thread blocks in ``wait`` until a message is
    queued, ``wake`` is called or the timeout passes; one thread waits at a time."""

    def __init__(self, node: Node, msg_type, topic: str, qos: QoSProfile):
        super().__init__(node, msg_type, topic, qos)
        self._waiter = _Waiter(node, [self])

    def wait(self, timeout_s: float) -> None:
        """Block until a message is queued, ``wake``, or ``timeout_s`` (then ``take_all``)."""
        self._waiter.wait(timeout_s)

    def wake(self) -> None:
        """Return a ``wait`` in progress now (for a thread that is stopping)."""
        self._waiter.wake()

    def destroy(self) -> None:
        """Free the wake-up condition (the subscription goes with its node)."""
        self._waiter.destroy()


class WaitedSubscriptions:
    """Polled subscriptions of several topics, each with its handler, that one thread
    blocks on together: ``wait`` returns when any of them has a message queued (or on
    ``wake`` or the timeout), and ``take_all`` returns ``(handler, message)`` pairs: every
    queued message of the first subscription in order, then of the next (a
    ``MessageDrivenThread`` source whose ``on_message`` calls the handler)."""

    def __init__(self, node: Node,
                 handlers: Mapping[PolledSubscription, Callable[[object], None]]):
        self._handlers = dict(handlers)
        self._waiter = _Waiter(node, list(self._handlers))

    def wait(self, timeout_s: float) -> None:
        """Block until a message is queued, ``wake``, or ``timeout_s`` (then ``take_all``)."""
        self._waiter.wait(timeout_s)

    def take_all(self) -> list[tuple[Callable[[object], None], object]]:
        return [(handler, msg) for sub, handler in self._handlers.items()
                for msg in sub.take_all()]

    def wake(self) -> None:
        """Return a ``wait`` in progress now (for a thread that is stopping)."""
        self._waiter.wake()

    def destroy(self) -> None:
        """Free the wake-up condition (the subscriptions go with their node)."""
        self._waiter.destroy()


def incompatible_publishers(node: Node, topic: str, qos: QoSProfile) -> list[str]:
    """Nodes publishing ``topic`` with QoS a reader with ``qos`` cannot take: best effort
    for a reliable reader, volatile for a transient-local one (from the ROS graph)."""
    names = []
    for info in node.get_publishers_info_by_topic(node.resolve_topic_name(topic)):
        offered = info.qos_profile
        if (qos.reliability == ReliabilityPolicy.RELIABLE and
                offered.reliability == ReliabilityPolicy.BEST_EFFORT) or \
                (qos.durability == DurabilityPolicy.TRANSIENT_LOCAL and
                 offered.durability == DurabilityPolicy.VOLATILE):
            names.append(info.node_name)
    return names


class IncompatiblePublisherCheck:
    """Polled readers' stand-in for the incompatible-QoS event: ``new_findings`` (from a
    node's diagnostics timer) returns ``(topic, publisher node)`` for each topic of
    ``subscriptions`` that a publisher its reader cannot take has appeared on, once per
    topic."""

    def __init__(self, node: Node, subscriptions: Sequence[PolledSubscription]):
        self._node = node
        self._subscriptions = list(subscriptions)
        self._reported: set[str] = set()

    def new_findings(self) -> list[tuple[str, str]]:
        findings = []
        for sub in self._subscriptions:
            topic = sub.subscription.topic_name
            if topic in self._reported:
                continue
            publishers = incompatible_publishers(self._node, topic, sub.qos)
            if publishers:
                self._reported.add(topic)
                findings.append((topic, publishers[0]))
        return findings
