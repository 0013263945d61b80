"""Polled subscriptions: read in one take, never woken for by the executor (real DDS)."""

from rclpy.qos import QoSProfile
from std_msgs.msg import Int32

from diffusion_policy_ros.ros.polled import PolledSubscription


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
