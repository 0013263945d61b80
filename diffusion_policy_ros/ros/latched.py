"""Subscribing to a latched topic so that publishers of either durability reach the node.

A transient-local subscription gets the sample that a latched publisher keeps for
late joiners, but never matches a volatile publisher (``ros2 topic pub``'s default):
DDS checks durability when matching. A volatile subscription matches both kinds but
gets no kept sample. ``subscribe_any_durability`` creates one of each and hands every
message to the callback once: a live message of a transient-local publisher arrives on
both and is recognised by its publisher and sequence number (``FirstDelivery``).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile


class FirstDelivery:
    """True the first time a message identity (from rclpy's ``MessageInfo``) is seen.

    The identity is (publisher GID, publication sequence number); where the middleware
    reports neither, the source timestamp. With none of them every delivery counts as
    new. Only the last ``keep`` identities are remembered: the two copies of one
    message arrive moments apart.
    """

    def __init__(self, keep: int = 64):
        self._order: collections.deque = collections.deque(maxlen=keep)
        self._seen: set = set()

    @staticmethod
    def identity(info: dict):
        gid = info.get("publisher_gid")
        seq = info.get("publication_sequence_number")
        if gid is not None and seq is not None:
            return bytes(gid.get("data", b"")), int(seq)
        stamp = info.get("source_timestamp")
        return ("source_timestamp", int(stamp)) if stamp else None

    def first(self, info: dict) -> bool:
        key = self.identity(info)
        if key is None:
            return True
        if key in self._seen:
            return False
        if len(self._order) == self._order.maxlen:
            self._seen.discard(self._order[0])
        self._order.append(key)
        self._seen.add(key)
        return True


def subscribe_any_durability(node: Node, msg_type, topic: str, callback: Callable,
                             depth: int = 1, callback_group=None) -> tuple:
    """Reliable transient-local + reliable volatile subscriptions, each message passed once.

    The transient-local one does not report the volatile publishers it cannot match
    (the volatile one receives from them), so ``ros2 topic pub`` causes no warning.
    """
    seen = FirstDelivery()
    lock = threading.Lock()  # the two subscriptions may run on two executor threads

    def deliver(msg, info) -> None:
        with lock:
            first = seen.first(info)
        if first:
            callback(msg)

    kept = QoSProfile(depth=depth, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    latched = node.create_subscription(
        msg_type, topic, deliver, kept, callback_group=callback_group,
        event_callbacks=SubscriptionEventCallbacks(incompatible_qos=lambda _event: None))
    live = node.create_subscription(msg_type, topic, deliver, QoSProfile(depth=depth),
                                    callback_group=callback_group)
    return latched, live
