"""A publish the middleware refuses is a counted, throttled-logged drop, not an exception."""

import pytest
from rclpy.qos import QoSProfile
from std_msgs.msg import Int32

from diffusion_policy_ros.ros.publish_guard import PublishGuard, PublishRefused


class RecordingLogger:
    def __init__(self):
        self.errors = []

    def error(self, text):
        self.errors.append(text)


class RefusingPublisher:
    """Stands in for a Fast DDS writer whose full history cannot release its oldest sample
    (what rclpy raises then; the condition itself cannot be provoked on demand)."""

    topic_name = "/joint_states"

    def __init__(self):
        self.refuse = True
        self.sent = []

    def publish(self, msg):
        if self.refuse:
            raise PublishRefused("Failed to publish: cannot publish data, at "
                                 "/project/src/rmw_publish.cpp:68")
        self.sent.append(msg)


def test_refused_samples_are_counted_per_topic_and_logged_throttled():
    logger = RecordingLogger()
    guard = PublishGuard(logger, log_period_s=60.0)
    pub = RefusingPublisher()
    assert [guard.publish(pub, Int32(data=k)) for k in range(3)] == [False] * 3
    assert guard.refused.counts["/joint_states"] == 3 and guard.refused_total == 3
    assert len(logger.errors) == 1  # once per topic per log period
    assert "/joint_states" in logger.errors[0] and "cannot publish data" in logger.errors[0]
    pub.refuse = False
    assert guard.publish(pub, Int32(data=7)) and pub.sent[-1].data == 7
    assert guard.refused_total == 3


def test_a_programming_error_still_raises():
    class WrongType(RefusingPublisher):
        def publish(self, msg):
            raise TypeError("wrong message type")

    with pytest.raises(TypeError):
        PublishGuard(RecordingLogger()).publish(WrongType(), Int32())


def test_a_real_publisher_delivers_through_the_guard(ros):
    got = []
    ros.node.create_subscription(Int32, "guarded", lambda m: got.append(m.data),
                                 QoSProfile(depth=5))
    pub = ros.node.create_publisher(Int32, "guarded", QoSProfile(depth=5))
    ros.spin_until(lambda: pub.get_subscription_count() == 1, 10.0, "the subscription")
    guard = PublishGuard(ros.node.get_logger())
    assert guard.publish(pub, Int32(data=5))
    ros.spin_until(lambda: got == [5], 10.0, "the message")
    assert guard.refused_total == 0
