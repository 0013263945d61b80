"""A node's ROS clock on /clock through a thread of its own, not its executor (real DDS)."""

import rclpy
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile
from rosgraph_msgs.msg import Clock

from diffusion_policy_ros.ros.sim_clock import ClockThread, drop_time_source_subscription


def _clock_subscriptions(node) -> int:
    return sum(s.topic_name == "/clock" for s in node.subscriptions)


def _sim_time_node(ros, name: str):
    return rclpy.create_node(name, context=ros.context,
                             parameter_overrides=[Parameter("use_sim_time", value=True)])


def _clock_msg(ns: int) -> Clock:
    msg = Clock()
    msg.clock.sec, msg.clock.nanosec = divmod(ns, 1_000_000_000)
    return msg


def test_clock_thread_follows_clock_and_drives_the_nodes_sim_time_timers(ros):
    node = _sim_time_node(ros, "clock_follower")
    assert _clock_subscriptions(node) == 1  # rclpy's TimeSource, run by the executor
    follower = ClockThread(node)
    try:
        assert follower.following
        assert _clock_subscriptions(node) == 1  # the thread's, in place of the TimeSource's
        fired = []
        node.create_timer(0.1, lambda: fired.append(node.get_clock().now().nanoseconds))
        ros.executor.add_node(node)
        pub = ros.node.create_publisher(Clock, "/clock", QoSProfile(depth=1))
        ros.spin_until(lambda: pub.get_subscription_count() >= 1, 10.0, "the /clock reader")
        # Sim time runs from 1 s in 10 ms steps while the test spins: 0.5 s of sim time.
        for k in range(51):
            pub.publish(_clock_msg(1_000_000_000 + 10_000_000 * k))
            ros.spin_for(0.01)
        ros.spin_until(lambda: node.get_clock().now().nanoseconds == 1_500_000_000, 10.0,
                       lambda: f"the node's clock at 1.5 s: {node.get_clock().now()}")
        # A 0.1 s timer on the node's ROS clock fires on sim time, as with the TimeSource.
        ros.spin_for(0.2)
        assert 3 <= len(fired) <= 6, fired
        assert all(1_000_000_000 <= t <= 1_500_000_000 for t in fired), fired
    finally:
        follower.stop()
        ros.executor.remove_node(node)
        node.destroy_node()


def test_clock_thread_does_nothing_off_sim_time(ros):
    node = rclpy.create_node("wall_clock_node", context=ros.context)
    try:
        follower = ClockThread(node)
        assert not follower.following and _clock_subscriptions(node) == 0
        follower.stop()
    finally:
        node.destroy_node()


def test_a_node_that_sets_its_own_clock_reads_no_clock(ros):
    node = _sim_time_node(ros, "clock_source")
    try:
        assert drop_time_source_subscription(node)
        assert _clock_subscriptions(node) == 0 and not drop_time_source_subscription(node)
        clock = node.get_clock()
        assert clock.ros_time_is_active and clock.now().nanoseconds == 0
        pub = ros.node.create_publisher(Clock, "/clock", QoSProfile(depth=1))
        pub.publish(_clock_msg(2_000_000_000))
        ros.spin_for(0.2)
        assert clock.now().nanoseconds == 0  # nothing reads /clock for it
    finally:
        node.destroy_node()


def test_a_stopped_clock_thread_makes_the_health_report_an_error(ros):
    node = _sim_time_node(ros, "clock_follower_failing")
    follower = ClockThread(node)
    try:
        status = DiagnosticStatus(level=DiagnosticStatus.OK, message="ok")
        follower.report(status)
        assert follower.problem == "" and status.level == DiagnosticStatus.OK

        def fail(_msg):
            raise ValueError("a clock that cannot be set")

        follower._thread._on_message = fail
        pub = ros.node.create_publisher(Clock, "/clock", QoSProfile(depth=1))
        ros.spin_until(lambda: pub.get_subscription_count() >= 1, 10.0, "the /clock reader")
        ros.spin_until(lambda: pub.publish(_clock_msg(1_000_000_000)) or follower.problem,
                       10.0, "the thread to stop")
        follower.report(status)
        assert status.level == DiagnosticStatus.ERROR
        assert "ValueError: a clock that cannot be set" in status.message
        assert "stands still" in status.message
    finally:
        follower.stop()
        node.destroy_node()
