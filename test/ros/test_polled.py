"""Polled subscriptions: read in one take, never woken for by the executor (real DDS)."""

import time

import rclpy
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Int32, String

from diffusion_policy_ros.ros.polled import (
    IncompatiblePublisherCheck,
    PolledSubscription,
    WaitedSubscriptions,
    incompatible_publishers,
)
from diffusion_policy_ros.ros.realtime import MessageDrivenThread


def test_take_all_returns_the_queue_in_order_and_the_executor_never_runs_it(ros):
    depth = 5
    polled = PolledSubscription(ros.node, Int32, "polled_test", QoSProfile(depth=depth))
    delivered = []  # an ordinary subscription on the same topic: shows what arrived
    ros.node.create_subscription(Int32, "polled_test", lambda m: delivered.append(m.data),
                                 QoSProfile(depth=20))
    pub = ros.node.create_publisher(Int32, "polled_test", QoSProfile(depth=20))
    ros.spin_until(lambda: pub.get_subscription_count() == 2, 10.0, "both subscriptions")
    assert polled.take_all() == [] and polled.take_latest() is None
    for k in range(1, 11):
        pub.publish(Int32(data=k))
    # Spinning runs the ordinary callback; the polled one raises if it is ever called.
    ros.spin_until(lambda: delivered[-1:] == [10], 10.0, "the ten messages")
    takes = [[m.data for m in polled.take_all()]]
    ros.spin_until(lambda: takes[-1][-1:] == [10] or takes.append(
        [m.data for m in polled.take_all()]), 10.0, "the last message in a take")
    taken = [k for take in takes for k in take]
    assert taken == sorted(taken) and taken[-1] == 10
    assert all(len(take) <= depth for take in takes)  # KEEP_LAST: the newest `depth` kept
    assert polled.taken_total == len(taken)
    pub.publish(Int32(data=11))
    pub.publish(Int32(data=12))
    ros.spin_until(lambda: delivered[-1:] == [12], 10.0, "two more")
    latest = []
    ros.spin_until(lambda: (latest.append(polled.take_latest()) or latest[-1] is not None),
                   10.0, "the newest message")
    assert latest[-1].data == 12 and polled.take_latest() is None


def test_waited_subscriptions_hand_each_topics_messages_to_one_thread_as_they_come(ros):
    numbers = PolledSubscription(ros.node, Int32, "waited_numbers", QoSProfile(depth=10))
    words = PolledSubscription(ros.node, String, "waited_words", QoSProfile(depth=10))
    def on_number(msg):
        pass

    def on_word(msg):
        pass

    topics = WaitedSubscriptions(ros.node, {numbers: on_number, words: on_word})
    taken = []
    thread = MessageDrivenThread(topics, lambda pair: taken.append(pair), 0, "waited_test",
                                 idle_wait_s=30.0)
    thread.start()
    try:
        pub_numbers = ros.node.create_publisher(Int32, "waited_numbers", QoSProfile(depth=10))
        pub_words = ros.node.create_publisher(String, "waited_words", QoSProfile(depth=10))
        ros.spin_until(lambda: pub_numbers.get_subscription_count() == 1 and
                       pub_words.get_subscription_count() == 1, 10.0, "both subscriptions")
        for k in (1, 2, 3):
            pub_numbers.publish(Int32(data=k))
        pub_words.publish(String(data="cube"))
        # The thread waits 30 s between idle wake-ups: only the messages wake it sooner.
        ros.spin_until(lambda: len(taken) == 4, 15.0, "the four messages")
        assert [m.data for handler, m in taken if handler is on_number] == [1, 2, 3]
        assert [m.data for handler, m in taken if handler is on_word] == ["cube"]
        assert thread.failure is None
    finally:
        started = time.monotonic()
        thread.stop(timeout_s=20.0)
        topics.destroy()
    assert not thread.running and time.monotonic() - started < 15.0  # woken, not timed out


def test_incompatible_publishers_are_found_in_the_graph_and_reported_once(ros):
    reliable = QoSProfile(depth=5)
    polled = PolledSubscription(ros.node, String, "polled_qos", reliable)
    check = IncompatiblePublisherCheck(ros.node, [polled])
    ros.node.create_publisher(String, "polled_qos", QoSProfile(depth=1))
    assert incompatible_publishers(ros.node, "polled_qos", reliable) == []
    assert check.new_findings() == []
    # A best-effort publisher cannot feed a reliable reader; a best-effort reader takes both.
    other = rclpy.create_node("polled_qos_other", context=ros.context)
    try:
        other.create_publisher(
            String, "polled_qos", QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
        ros.spin_until(lambda: incompatible_publishers(ros.node, "polled_qos", reliable),
                       15.0, "the best-effort publisher in the graph")
        assert incompatible_publishers(ros.node, "polled_qos", reliable) == ["polled_qos_other"]
        assert check.new_findings() == [("/polled_qos", "polled_qos_other")]
        assert check.new_findings() == []  # once per topic
        best_effort = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
        assert incompatible_publishers(ros.node, "polled_qos", best_effort) == []
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.BEST_EFFORT)
        assert len(incompatible_publishers(ros.node, "polled_qos", latched)) == 2  # volatile
    finally:
        other.destroy_node()
