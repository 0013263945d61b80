"""What an outside publisher can do to the arm, on the real nodes.

``sim_node`` (on sim time, in lockstep with the tracker, as ``dpr bringup`` runs it) and
``pd_tracker_node`` with the shipped parameter files run as processes; this process
plays another publisher on the graph. In one run:

* a chunk asking every joint for 100 rad is refused whole, counted, and the arm stays
  still;
* a chunk within the limits asking the base and the wrist for the far ends of their
  ranges moves the arm, whose measured speed stays under the velocity limit;
* when chunks stop, the tracker holds and says so on /diagnostics;
* joint_states stamped 0.5-2 s in the past, 100 a second, are dropped and counted with a
  WARN on /diagnostics, and cause no path abort.

Once on a quiet machine and once next to two CPU burners per core.
"""

import time

import pytest
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.time import Time
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from diffusion_policy_ros.config import CONFIG_DIR, load_config
from diffusion_policy_ros.control import PdTrackerConfig
from diffusion_policy_ros.ros.conversions import stamp_to_ns

pytestmark = pytest.mark.ros

NODES = "diffusion_policy_ros.ros."
TRACKER = load_config(PdTrackerConfig, CONFIG_DIR / "pd_tracker.yaml", "pd_tracker_node")
NAMES = [*TRACKER.joint_names, TRACKER.gripper_joint]
STILL_RAD_S = 0.05


class Probe:
    """The outside publisher, and what it sees of the arm and the tracker."""

    def __init__(self, ros):
        self.ros = ros
        node = ros.node
        self.q: list[float] | None = None
        self.stamp_ns = 0
        self.max_speed_rad_s = 0.0
        self.moving_stamp_ns = 0  # the newest sample at STILL_RAD_S or faster
        self.status: DiagnosticStatus | None = None
        self.statuses: list[DiagnosticStatus] = []
        node.create_subscription(JointState, "joint_states", self._on_state,
                                 QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT))
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag,
                                 QoSProfile(depth=50))
        self.chunk_pub = node.create_publisher(JointTrajectory, "policy/action_chunk",
                                               QoSProfile(depth=2))
        self.state_pub = node.create_publisher(JointState, "joint_states", QoSProfile(depth=10))

    def _on_state(self, msg: JointState) -> None:
        stamp = stamp_to_ns(msg.header.stamp)
        if stamp <= self.stamp_ns or list(msg.name[:6]) != NAMES[:6]:
            return  # our own stale samples
        self.stamp_ns = stamp
        self.q = list(msg.position[:6])
        speed = max(abs(v) for v in msg.velocity[:6])
        self.max_speed_rad_s = max(self.max_speed_rad_s, speed)
        if speed >= STILL_RAD_S:
            self.moving_stamp_ns = stamp

    def still_for_s(self) -> float:
        """How long (the arm's time) every joint has been slower than STILL_RAD_S."""
        return (self.stamp_ns - self.moving_stamp_ns) / 1e9

    def _on_diag(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith("pd_tracker_node"):
                self.status = status
                self.statuses.append(status)

    def value(self, key: str) -> str:
        if self.status is None:
            return ""
        return {kv.key: kv.value for kv in self.status.values}.get(key, "")

    def count(self, key: str) -> int:
        return int(self.value(key) or 0)

    def send_chunks(self, row: list[float], duration_s: float, rate_hz: float = 10.0,
                    until=None) -> None:
        """``row`` as 16-point chunks stamped with the arm's newest state, at ``rate_hz``,
        for ``duration_s`` or until ``until()`` (then failing at ``duration_s``)."""
        end = time.monotonic() + duration_s
        while until is None or not until():
            if time.monotonic() > end:
                if until is not None:
                    raise AssertionError(f"not reached in {duration_s} s: {until.__doc__}")
                return
            msg = JointTrajectory(joint_names=NAMES)
            msg.header.stamp = Time(nanoseconds=self.stamp_ns).to_msg()
            for k in range(16):
                ns = int(k * 0.1 * 1e9)
                msg.points.append(JointTrajectoryPoint(
                    positions=row, time_from_start=Duration(sec=ns // 10**9,
                                                            nanosec=ns % 10**9)))
            self.chunk_pub.publish(msg)
            self.ros.spin_for(1.0 / rate_hz)

    def send_stale_states(self, duration_s: float, rate_hz: float = 100.0) -> None:
        """joint_states 0.5-2 s older than the arm's newest, far from where it is."""
        end = time.monotonic() + duration_s
        k = 0
        while time.monotonic() < end:
            age_ns = int((0.5 + 1.5 * (k % 16) / 15) * 1e9)
            msg = JointState(name=NAMES, position=[1.0] * 6 + [0.04], velocity=[0.0] * 7)
            msg.header.stamp = Time(nanoseconds=max(1, self.stamp_ns - age_ns)).to_msg()
            self.state_pub.publish(msg)
            k += 1
            self.ros.spin_for(1.0 / rate_hz)


@pytest.mark.parametrize("loaded", [False, True],
                         ids=["quiet", "next-to-cpu-burners"])
def test_outside_chunks_and_states_never_drive_the_arm_past_its_limits(ros, start_node,
                                                                      loaded, request):
    if loaded:
        request.getfixturevalue("cpu_burners")
    ros.node.set_parameters([Parameter("use_sim_time", value=True)])
    probe = Probe(ros)
    sim = start_node(NODES + "sim_node", [
        "--params-file", str(CONFIG_DIR / "sim.yaml"), "-p", "publish_clock:=true",
        "-p", "render_observations:=false", "-p", "time_limit_s:=600.0",
        "-p", "use_sim_time:=true"])
    tracker = start_node(NODES + "pd_tracker_node", [
        "--params-file", str(CONFIG_DIR / "pd_tracker.yaml"), "-p", "use_sim_time:=true"])

    def logs() -> str:
        return f"--- sim\n{sim.log()[-2000:]}\n--- tracker\n{tracker.log()[-3000:]}"

    ros.spin_until(lambda: probe.q is not None and probe.value("mode") == "holding"
                   and probe.chunk_pub.get_subscription_count() > 0, 60.0,
                   lambda: f"the arm held by the tracker\n{logs()}")
    start = list(probe.q)

    # Every joint to 100 rad: refused whole, the arm does not move.
    probe.max_speed_rad_s = 0.0
    probe.send_chunks([100.0] * 6 + [0.04], 1.5)
    ros.spin_until(lambda: probe.count("chunks_rejected_out_of_limits") >= 5, 10.0,
                   lambda: f"out_of_limits refusals: {probe.status}\n{logs()}")
    assert probe.count("chunks_accepted") == 0
    assert probe.max_speed_rad_s < STILL_RAD_S
    assert max(abs(a - b) for a, b in zip(probe.q, start, strict=True)) < 0.01
    assert "rejected action chunk (out_of_limits)" in tracker.log()

    # The base and the wrist to the far ends of their ranges: the arm moves, under its
    # velocity limit.
    row = list(start)
    for j in (0, 3, 4, 5):
        row[j] = TRACKER.position_upper[j] - 0.06
    probe.max_speed_rad_s = 0.0

    def moved() -> bool:
        """every stepped joint 1 rad on (sim time slows down on a loaded machine)"""
        return all(abs(probe.q[j] - start[j]) > 1.0 for j in (0, 3, 4, 5))

    probe.send_chunks([*row, 0.04], 30.0, until=moved)
    assert probe.max_speed_rad_s < min(TRACKER.velocity_limits), logs()
    assert probe.count("overspeed_stops") == 0

    # Chunks stop: the tracker holds and reports it.
    ros.spin_until(lambda: probe.status is not None and probe.status.level
                   == DiagnosticStatus.WARN and probe.status.message.startswith("no chunks for")
                   and probe.status.message.endswith("s: holding"), 15.0,
                   lambda: f"'no chunks' WARN: {probe.status}\n{logs()}")

    # Old joint_states, 100 a second for 2 s, once the arm is at rest: dropped, counted,
    # a WARN; no path abort, the arm stays where it is.
    ros.spin_until(lambda: probe.still_for_s() > 0.3, 30.0,
                   lambda: f"the arm at rest: still for {probe.still_for_s():.3f} s")
    aborts = probe.count("path_aborts")
    resting = list(probe.q)
    probe.max_speed_rad_s = 0.0
    probe.statuses.clear()
    probe.send_stale_states(2.0)
    ros.spin_until(lambda: probe.count("joint_states_out_of_order") >= 50, 10.0,
                   lambda: f"out-of-order joint_states counted: {probe.status}\n{logs()}")
    assert any(s.level == DiagnosticStatus.WARN and "joint_states out of order" in s.message
               for s in probe.statuses), [s.message for s in probe.statuses]
    assert probe.count("path_aborts") == aborts, logs()
    assert probe.count("faults") == 0, logs()
    assert max(abs(a - b) for a, b in zip(probe.q, resting, strict=True)) < 0.01
    assert "dropped joint_states" in tracker.log()
    assert probe.max_speed_rad_s < STILL_RAD_S
    assert sim.alive() and tracker.alive(), logs()
