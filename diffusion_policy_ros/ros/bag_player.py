"""``dpr replay --publish``: play a rosbag2 into ROS topics, as ``ros2 bag play`` would.

Every message goes out as the raw CDR recorded in the bag (rclpy publishes
serialized bytes unchanged), in recorded order, with the original spacing of
the bag's receive times divided by ``rate``. ``/clock`` (rosgraph_msgs/Clock)
carries the bag time: before each message, and at ``clock_hz`` in between, so
nodes started with ``use_sim_time:=true`` (``rgbd_sync_node``, ``policy_node``,
``pd_tracker_node``) run on the recorded time line and can be evaluated on
recorded data. For bags from ``dpr collect`` the bag time is the sim time the
header stamps carry.

QoS: reliable, depth 100 (10 for images and clouds) for every topic, except
``instruction`` (transient local, depth 1, as ARCHITECTURE.md specifies, so a
policy started later still gets it). Messages published before a subscriber has matched are lost, so
playback first waits up to ``wait_s`` for every topic to have a subscriber and for
the lifecycle nodes in ``wait_active`` (e.g. policy_node, which loads its model
after subscribing) to be active. A matched subscriber on our side is half of
discovery: the subscriber's side may learn of our publisher later (a lost
announcement is repaired seconds later) and drops what arrives before. So the first
message of each topic is a handshake: playback holds (bag time with it) until every
reliable subscriber has acknowledged it, up to ``wait_s``; topics whose subscribers did
not are reported. ``report_topics`` are counted while playing (e.g. the policy's
``policy/action_chunk``) and reported with the playback summary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import threading
import time
from collections import Counter
from pathlib import Path

import rclpy
from rclpy.client import Client
from rclpy.duration import Duration
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import DurabilityPolicy, QoSProfile
from rosgraph_msgs.msg import Clock

from diffusion_policy_ros.learning.episode_bag import TOPIC_INSTRUCTION, BagError, open_bag
from diffusion_policy_ros.ros.dds_profiles import use_package_dds_profiles
from diffusion_policy_ros.ros.publish_guard import PublishGuard


@dataclasses.dataclass
class PlayOptions:
    bag: Path
    rate: float = 1.0
    clock: bool = True
    clock_hz: float = 100.0
    wait_s: float = 2.0
    """Wait up to this long for a subscriber on every played topic before starting."""
    flush_s: float = 2.0
    """After the last message, wait up to this long for every subscriber's acknowledgement."""
    topics: list[str] | None = None
    """Play only these topics (a leading "/" is optional); None: all."""
    namespace: str = ""
    wait_active: list[str] = dataclasses.field(default_factory=list)
    """Lifecycle nodes (relative names) that must be active before playing (up to wait_s)."""
    report_topics: list[str] = dataclasses.field(default_factory=list)
    """Topics whose messages are counted while playing and reported."""


@dataclasses.dataclass
class PlayReport:
    messages: dict[str, int]
    bag_duration_s: float
    wall_duration_s: float
    max_lateness_ms: float
    """Worst delay of a publish behind its scheduled wall time."""
    unmatched_topics: list[str]
    interrupted: bool = False
    inactive_nodes: list[str] = dataclasses.field(default_factory=list)
    received: dict[str, int] = dataclasses.field(default_factory=dict)
    """Messages counted on ``report_topics`` while playing."""
    refused: dict[str, int] = dataclasses.field(default_factory=dict)
    """Messages the middleware refused to publish (dropped; ``ros.publish_guard``)."""
    unacknowledged_topics: list[str] = dataclasses.field(default_factory=list)
    """Topics whose first message a subscriber had not acknowledged within ``wait_s``."""

    def summary(self) -> str:
        total = sum(self.messages.values())
        text = (f"played {total} messages on {len(self.messages)} topics: "
                f"{self.bag_duration_s:.2f} s of bag in {self.wall_duration_s:.2f} s wall, "
                f"max lateness {self.max_lateness_ms:.1f} ms")
        for topic, count in self.received.items():
            per_s = count / self.bag_duration_s if self.bag_duration_s > 0 else 0.0
            text += f"\nreceived {count} messages on {topic} ({per_s:.1f} per bag second)"
        if self.unmatched_topics:
            text += f"\nno subscriber matched in time on: {', '.join(self.unmatched_topics)}"
        if self.unacknowledged_topics:
            text += ("\nfirst message not acknowledged by every subscriber in time on: "
                     + ", ".join(self.unacknowledged_topics))
        if self.refused:
            text += ("\nrefused by the middleware (dropped): "
                     + ", ".join(f"{n} on {topic}" for topic, n in self.refused.items()))
        if self.inactive_nodes:
            text += f"\nnot active when playing began: {', '.join(self.inactive_nodes)}"
        if self.interrupted:
            text += "\ninterrupted"
        return text


def message_class(msgtype: str):
    """The rclpy message class of ``pkg/msg/Name``, or BagError when it is not installed."""
    try:
        package, kind, name = msgtype.split("/")
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ValueError, ImportError, AttributeError) as exc:
        raise BagError(f"unknown message type {msgtype}: no Python module for it in this ROS "
                       "install (install its interface package)") from exc


LARGE_MESSAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/PointCloud2")


def qos_for(topic: str, msgtype: str = "") -> QoSProfile:
    """Reliable; the history is what a late-matching subscriber can still recover.

    Small messages keep 100 (0.2 s of 500 Hz joint states), so a subscriber whose
    side of discovery completes a little after ours still gets the first ones;
    images and clouds keep 10 (a few MB each).
    """
    if topic.lstrip("/") == TOPIC_INSTRUCTION:
        return QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    return QoSProfile(depth=10 if msgtype in LARGE_MESSAGE_TYPES else 100)


class BagPlayer(Node):
    """Publishers for a bag's connections plus ``/clock``; ``play`` does the timing."""

    def __init__(self, connections, options: PlayOptions, **kwargs):
        super().__init__("dpr_bag_player", namespace=options.namespace or "", **kwargs)
        self.options = options
        self.publishing = PublishGuard(self.get_logger(), self.context)
        self.pubs: dict[str, Publisher] = {}
        for conn in connections:
            if conn.topic not in self.pubs:
                self.pubs[conn.topic] = self.create_publisher(
                    message_class(conn.msgtype), conn.topic, qos_for(conn.topic, conn.msgtype))
        # Reliable depth 1 matches rclpy's / rclcpp's best-effort /clock subscriptions too.
        self.clock_pub = (self.create_publisher(Clock, "/clock", QoSProfile(depth=1))
                          if options.clock else None)
        self.unacknowledged: list[str] = []

    def wait_for_active(self, nodes: list[str], timeout_s: float) -> list[str]:
        """Poll ``<node>/get_state`` until each node is active; returns those that are not.

        Needs the node spun (``play`` runs an executor thread).
        """
        from lifecycle_msgs.srv import GetState

        deadline = time.monotonic() + timeout_s
        pending = list(nodes)
        clients: dict[str, Client] = {n: self.create_client(GetState, f"{n}/get_state")
                                      for n in nodes}
        try:
            while pending and time.monotonic() < deadline and self.context.ok():
                for name in list(pending):
                    if not clients[name].service_is_ready():
                        continue
                    future = clients[name].call_async(GetState.Request())
                    answer_by = min(deadline, time.monotonic() + 2.0)
                    while not future.done() and time.monotonic() < answer_by:
                        time.sleep(0.02)
                    result = future.result() if future.done() else None
                    if result is not None and result.current_state.label == "active":
                        pending.remove(name)
                time.sleep(0.1)
        finally:
            for client in clients.values():
                self.destroy_client(client)
        return pending

    def count_topics(self, topics: list[str], timeout_s: float) -> dict[str, list[int]]:
        """Subscribe to ``topics`` with the type their publishers have (waiting up to
        ``timeout_s`` for one); returns the live per-topic counters ([count])."""
        counters: dict[str, list[int]] = {}
        deadline = time.monotonic() + timeout_s
        for topic in topics:
            name = self.resolve_topic_name(topic)
            types: list[str] = []
            while not types and time.monotonic() < deadline and self.context.ok():
                types = dict(self.get_topic_names_and_types()).get(name, [])
                if not types:
                    time.sleep(0.05)
            counter = counters[topic] = [0]
            if types:
                self.create_subscription(
                    message_class(types[0]), topic,
                    lambda _msg, c=counter: c.__setitem__(0, c[0] + 1), QoSProfile(depth=10))
        return counters

    def unmatched(self) -> list[str]:
        return [t for t, p in self.pubs.items() if p.get_subscription_count() == 0]

    def wait_for_subscribers(self, timeout_s: float) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while self.unmatched() and time.monotonic() < deadline and self.context.ok():
            time.sleep(0.02)
        return self.unmatched()

    def flush(self, timeout_s: float) -> bool:
        """Wait until every subscriber acknowledged what was published (reliable QoS).

        Without it the last messages can be lost when the player exits right after
        publishing them, before the DDS retransmission they may need.
        """
        deadline = time.monotonic() + timeout_s
        for pub in self.pubs.values():
            left = max(0.0, deadline - time.monotonic())
            if not pub.wait_for_all_acked(Duration(nanoseconds=int(left * 1e9))):
                return False
        return True

    def publish_clock(self, t_ns: int) -> None:
        if self.clock_pub is not None:
            msg = Clock()
            msg.clock.sec, msg.clock.nanosec = divmod(int(t_ns), 1_000_000_000)
            self.publishing.publish(self.clock_pub, msg)

    def await_first_acknowledgement(self, topic: str, deadline: float) -> float:
        """Hold until every reliable subscriber of ``topic`` acknowledged what was
        published (its side of discovery is then complete), at most until ``deadline``
        (monotonic s); a topic still waiting then goes to ``unacknowledged``. Returns
        the seconds held."""
        start = time.monotonic()
        left_ns = int(max(0.0, deadline - start) * 1e9)
        if not self.pubs[topic].wait_for_all_acked(Duration(nanoseconds=left_ns)):
            self.unacknowledged.append(topic)
        return time.monotonic() - start

    def play(self, messages) -> tuple[Counter, float, float, float, bool]:
        """Publish ``(connection, t_ns, raw)`` in order with scaled timing; the first
        message of each topic waits for its acknowledgement (module docstring), and the
        schedule, bag time included, moves on by the time that took."""
        rate = self.options.rate
        clock_period_s = 1.0 / self.options.clock_hz if self.options.clock_hz > 0 else None
        counts: Counter = Counter()
        t0_bag = t_last = None
        wall0 = time.monotonic()
        handshake_deadline = wall0 + self.options.wait_s
        lateness = 0.0
        for conn, t_ns, raw in messages:
            if not self.context.ok():
                return counts, t_last or 0, t0_bag or 0, lateness, True
            if t0_bag is None:
                t0_bag, wall0 = t_ns, time.monotonic()
            due = wall0 + (t_ns - t0_bag) * 1e-9 / rate
            while (now := time.monotonic()) < due:
                if clock_period_s is None:
                    time.sleep(due - now)
                    break
                time.sleep(min(due - now, clock_period_s))
                now = min(time.monotonic(), due)
                self.publish_clock(t0_bag + int((now - wall0) * rate * 1e9))
            lateness = max(lateness, time.monotonic() - due)
            self.publish_clock(t_ns)
            first = conn.topic not in counts
            if self.publishing.publish(self.pubs[conn.topic], bytes(raw)):
                counts[conn.topic] += 1
                if first:
                    wall0 += self.await_first_acknowledgement(conn.topic, handshake_deadline)
            t_last = t_ns
        return counts, t_last or 0, t0_bag or 0, lateness, False


def play(options: PlayOptions, context=None) -> PlayReport:
    """Play the bag (see module docstring); rclpy must be initialised (``context``)."""
    if options.rate <= 0:
        raise ValueError("rate must be > 0")
    path = Path(options.bag)
    reader = open_bag(path)
    try:
        # "/joint_states" (ros2 bag record) and "joint_states" (dpr collect) are one topic.
        wanted = None if options.topics is None else {t.lstrip("/") for t in options.topics}
        connections = [c for c in reader.connections
                       if wanted is None or c.topic.lstrip("/") in wanted]
        if wanted is not None:
            missing = sorted(wanted - {c.topic.lstrip("/") for c in connections})
            if missing:
                raise BagError(f"{path}: no such topics in the bag: {missing}")
        player = BagPlayer(connections, options, context=context)
        executor = SingleThreadedExecutor(context=player.context)
        executor.add_node(player)
        spinner = threading.Thread(target=_spin, args=(executor,), daemon=True)
        spinner.start()
        try:
            counters = player.count_topics(options.report_topics, options.wait_s)
            unmatched = player.wait_for_subscribers(options.wait_s)
            inactive = player.wait_for_active(options.wait_active, options.wait_s)
            wall0 = time.monotonic()
            try:
                counts, t_last, t_first, lateness, interrupted = player.play(
                    reader.messages(connections=connections))
            except (BagError, KeyboardInterrupt, ExternalShutdownException):
                raise
            except Exception as exc:
                if not player.context.ok():
                    counts, t_last, t_first, lateness, interrupted = Counter(), 0, 0, 0.0, True
                else:
                    raise BagError(f"{path}: corrupt or truncated bag: {exc}") from exc
            if not interrupted:
                player.flush(options.flush_s)
            return PlayReport(dict(counts), (t_last - t_first) * 1e-9, time.monotonic() - wall0,
                              lateness * 1e3, unmatched, interrupted, inactive,
                              {topic: c[0] for topic, c in counters.items()},
                              dict(player.publishing.refused.counts),
                              list(player.unacknowledged))
        finally:
            executor.shutdown()
            spinner.join(timeout=5.0)
            player.destroy_node()
    finally:
        reader.close()


def _spin(executor: SingleThreadedExecutor) -> None:
    with contextlib.suppress(ExternalShutdownException):  # shutdown: play() reports it
        executor.spin()


def run(options: PlayOptions) -> int:
    """``dpr replay --publish``: exit code 0, or 2 for an unusable bag."""
    import sys

    use_package_dds_profiles()
    rclpy.init()
    try:
        report = play(options)
    except BagError as exc:
        print(f"dpr replay: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, ExternalShutdownException):
        return 0
    finally:
        rclpy.try_shutdown()
    print(report.summary())
    return 0
