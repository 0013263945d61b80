"""pd_tracker_node: action chunks -> smooth, limited PD efforts at ``rate_hz``.

Thin adapter around ``control.PdTracker``: converts ``policy/action_chunk``
(trajectory_msgs/JointTrajectory) and ``joint_states`` into plain data, ticks
the tracker and publishes ``arm_controller/commands`` (efforts in ``joint_names``
order, every tick), ``gripper_controller/commands`` ([opening m], when it changes and
every ``gripper_keepalive_s``), ``tracker/reference`` (at ``reference_rate_hz``) and
``/diagnostics``.

``tick_source``: on a real arm the law runs at ``rate_hz`` on the latest state, on a
thread of its own (``realtime.PeriodicThread``, ``SCHED_FIFO``) rather than an executor
timer, so that no callback of this node can sit between a deadline and its tick. That
thread owns the tracker while it runs: chunks, converted on the executor, wait in a
queue and are submitted after the tick's commands are out; ``/diagnostics`` reads the
tracker under a lock. Under ``use_sim_time`` (``auto``) each ``joint_states`` message
runs the law at its own stamp, so every command answers exactly one state, which is
what sim_node's lockstep waits for before it steps on: the loop then stays the discrete
system that was tuned however late the machine delivers, and only the sim's pace drops.
That law runs on a thread of its own too (``realtime.MessageDrivenThread``, same
priority), woken by the ``joint_states`` reader itself rather than through the
executor, whose wake-up per message cost more CPU than the law.
"""

from __future__ import annotations

import collections
import math
import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from diffusion_policy_ros.control import ActionChunk, PdTracker, PdTrackerConfig, TrackerMode
from diffusion_policy_ros.control.chunk import RejectReason
from diffusion_policy_ros.control.joint_states import JointStateCache, StateDrop
from diffusion_policy_ros.control.publish_gates import HeldCommandGate, RateGate
from diffusion_policy_ros.monitoring import RollingStats, ThrottledReasons
from diffusion_policy_ros.ros.conversions import stamp_to_ns
from diffusion_policy_ros.ros.lean_events import LeanEventsMixin
from diffusion_policy_ros.ros.node_main import run_node
from diffusion_policy_ros.ros.params import declare_config
from diffusion_policy_ros.ros.polled import WaitedSubscription
from diffusion_policy_ros.ros.publish_guard import PublishGuard
from diffusion_policy_ros.ros.realtime import (
    GIL_SWITCH_INTERVAL_S,
    MessageDrivenThread,
    PeriodicThread,
    request_fifo_priority,
)
from diffusion_policy_ros.ros.sim_clock import ClockThread


def chunk_from_msg(msg: JointTrajectory) -> ActionChunk:
    return ActionChunk(
        stamp_s=stamp_to_ns(msg.header.stamp) * 1e-9,
        joint_names=list(msg.joint_names),
        times_from_start_s=[p.time_from_start.sec + p.time_from_start.nanosec * 1e-9
                            for p in msg.points],
        positions=[list(p.positions) for p in msg.points])


class PdTrackerNode(LeanEventsMixin, Node):
    def __init__(self, **kwargs) -> None:
        # Before anything can fail: destroy_node reads them.
        self.loop: PeriodicThread | MessageDrivenThread | None = None
        self.joint_states: WaitedSubscription | None = None
        self.clock_thread: ClockThread | None = None
        super().__init__("pd_tracker_node", **kwargs)
        # Before the executor's thread takes SCHED_FIFO below, which threads inherit.
        self.clock_thread = ClockThread(self)
        self.config: PdTrackerConfig = declare_config(self, PdTrackerConfig)
        cfg = self.config
        self.tracker = PdTracker(cfg)
        self.states = JointStateCache(cfg.joint_names, cfg.gripper_joint,
                                      cfg.state_future_tolerance_s)
        self._state_drops_reported = 0
        self.rejects = ThrottledReasons(period_s=2.0)
        self.publishing = PublishGuard(self.get_logger(), self.context)
        self.period_error_ms = RollingStats(window=5000)
        self.tick_ms = RollingStats(window=5000)
        self._last_tick_wall: float | None = None
        self._ticks_total = 0
        self._efforts_sent = 0
        self._window = (0, time.perf_counter())
        self._path_aborts_reported = (0, 0)
        self._published_fault = ""
        self._tracker_lock = threading.Lock()
        self._pending_chunks: collections.deque[ActionChunk] = collections.deque(maxlen=4)
        # Efforts go out every tick; the gripper on change (and keepalive), the reference
        # at reference_rate_hz of the tracker's clock.
        self._gripper_gate = HeldCommandGate(cfg.gripper_keepalive_s)
        self._reference_gate = (RateGate(cfg.reference_rate_hz)
                                if cfg.reference_rate_hz < cfg.rate_hz else None)

        self.effort_pub = self.create_publisher(Float64MultiArray, "arm_controller/commands",
                                                QoSProfile(depth=1))
        self.gripper_pub = self.create_publisher(Float64MultiArray,
                                                 "gripper_controller/commands",
                                                 QoSProfile(depth=1))
        self.reference_pub = self.create_publisher(
            JointState, "tracker/reference",
            QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", QoSProfile(depth=10))
        self.create_subscription(JointTrajectory, "policy/action_chunk", self._on_chunk,
                                 QoSProfile(depth=2))
        source = cfg.tick_source
        if source == "auto":
            source = "joint_states" if self.get_parameter("use_sim_time").value else "timer"
        self.tick_on_joint_states = source == "joint_states"
        # Best effort: the law wants the newest state; and in sim_node's lockstep a state
        # that DDS lost is published again, which a reliable reader would hold back
        # until the lost one was repaired.
        state_qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
        if self.tick_on_joint_states:
            self.joint_states = WaitedSubscription(self, JointState, "joint_states", state_qos)
        else:
            self.create_subscription(JointState, "joint_states", self._on_joint_states,
                                     state_qos)
        # On the steady clock, as every node here: a paused or slow sim-time clock must
        # not silence a node's health report.
        self.create_timer(1.0, self._publish_diagnostics,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._reference = JointState(name=list(cfg.joint_names))
        # The executor's thread one step below the loop: a callback holding the GIL is
        # never preempted by normal-priority work while the loop waits for it.
        request_fifo_priority(max(1, cfg.realtime_priority - 1) if cfg.realtime_priority
                              else 0)
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        if self.joint_states is not None:
            self.loop = MessageDrivenThread(self.joint_states, self._on_joint_states,
                                            cfg.realtime_priority, "pd_tracker_states")
        else:
            # A steady clock (a ROS-clock timer on sim time would fire once per /clock
            # batch); the timeline still reads the node's clock.
            self.loop = PeriodicThread(self._tick, 1.0 / cfg.rate_hz, cfg.realtime_priority,
                                       "pd_tracker_loop")
        problem = self.loop.start()
        self.scheduling = (f"SCHED_FIFO {cfg.realtime_priority}" if not problem
                           else "normal")
        if cfg.realtime_priority and problem:
            self.get_logger().warning(f"realtime_priority: {problem}; running with normal "
                                      "scheduling (expect more period jitter under load)")
        rate = ("a tick per joint_states" if self.tick_on_joint_states
                else f"{cfg.rate_hz:.0f} Hz on a thread of its own")
        self.get_logger().info(f"pd_tracker_node ready: {rate}, blend "
                               f"'{cfg.blend_strategy}', joints {list(cfg.joint_names)}, "
                               f"scheduling {self.scheduling}")

    def _now_s(self) -> float:
        """The node's clock; ticking on joint_states, at least the newest state's stamp
        (sim_node publishes ``/clock`` at a lower rate than the states it stamps)."""
        now = self.get_clock().now().nanoseconds * 1e-9
        latest = self.states.latest
        if self.tick_on_joint_states and latest is not None:
            now = max(now, latest.stamp_s)
        return now

    def _report(self, reason: str, message: str) -> None:
        if self.rejects.record(reason, time.monotonic()):
            self.get_logger().error(f"{message} [{self.rejects.counts[reason]} so far]")

    def destroy_node(self) -> None:
        if self.loop is not None:
            self.loop.stop()
        if self.clock_thread is not None:
            self.clock_thread.stop()
        if self.joint_states is not None:
            self.joint_states.destroy()
        super().destroy_node()

    def _on_chunk(self, msg: JointTrajectory) -> None:
        chunk = chunk_from_msg(msg)
        if self.loop is None:
            self._submit(chunk)
        else:
            self._pending_chunks.append(chunk)

    def _submit(self, chunk: ActionChunk) -> None:
        with self._tracker_lock:
            decision = self.tracker.submit_chunk(chunk, self._now_s())
        if decision.accepted:
            return
        if decision.reason in (RejectReason.SAME_STAMP, RejectReason.BEFORE_PATH_ABORT):
            # Counted, not errors: a policy ticking before a new observation, and the chunk
            # that was in flight when the path was aborted (the abort itself is warned of).
            self.get_logger().debug(f"skipped action chunk: {decision.detail}")
            return
        reason = decision.reason
        assert reason is not None  # a rejection has one
        self._report(f"chunk_{reason.value}",
                     f"rejected action chunk ({reason.value}): {decision.detail}")

    def _on_joint_states(self, msg: JointState) -> None:
        stamp_ns = stamp_to_ns(msg.header.stamp)
        clock_ns = self.get_clock().now().nanoseconds
        clock_s = clock_ns * 1e-9 if clock_ns else None  # unset: no /clock yet on sim time
        stamp_s = stamp_ns * 1e-9 if stamp_ns else self._now_s()
        resyncs = self.states.time_resyncs
        drop, problem = self.states.update(msg.name, msg.position, msg.velocity, stamp_s,
                                           clock_s, time.monotonic())
        if drop is not None:
            self._report(drop.value, f"dropped joint_states: {problem}")
            return
        if self.states.time_resyncs != resyncs:
            self.get_logger().warning("joint_states time went backwards and stayed there "
                                      "(publisher restarted?): following the new time")
        if self.tick_on_joint_states:
            self._tick(stamp_s)

    def _tick(self, now_s: float | None = None) -> None:
        wall = time.perf_counter()
        if self._last_tick_wall is not None:
            period_ms = (wall - self._last_tick_wall) * 1e3
            self.period_error_ms.add(abs(period_ms - 1e3 / self.config.rate_hz))
        self._last_tick_wall = wall
        sample = self.states.latest
        now_s = self._now_s() if now_s is None else now_s
        with self._tracker_lock:
            if sample is None:
                cmd = self.tracker.tick(now_s, None, None, None, None)
            else:
                cmd = self.tracker.tick(now_s, sample.q_rad, sample.qd_rad_s, sample.stamp_s,
                                        sample.gripper_opening_m)
        if cmd.mode is TrackerMode.FAULT and cmd.fault != self._published_fault:
            if sample is None:  # start-up: the arm's first joint_states are on their way
                self.get_logger().info("waiting for the first joint_states (zero effort "
                                       "until they arrive)")
            else:
                action = ("braking with damping only" if any(cmd.effort_nm)
                          else "commanding zero effort")
                self._report("fault", f"tracker fault: {cmd.fault}; {action}")
        self._published_fault = cmd.fault
        if cmd.send:
            if self.publishing.publish(self.effort_pub,
                                       Float64MultiArray(data=list(cmd.effort_nm))):
                self._efforts_sent += 1
            if cmd.gripper_opening_m is not None and \
                    self._gripper_gate.due(cmd.gripper_opening_m, now_s):
                self.publishing.publish(self.gripper_pub,
                                        Float64MultiArray(data=[cmd.gripper_opening_m]))
            if self._reference_gate is None or self._reference_gate.due(now_s):
                ref = self._reference
                ref.header.stamp = self.get_clock().now().to_msg()
                ref.position = list(cmd.q_ref)
                ref.velocity = list(cmd.qd_ref)
                self.publishing.publish(self.reference_pub, ref)
        self._ticks_total += 1
        self.tick_ms.add((time.perf_counter() - wall) * 1e3)
        while self._pending_chunks:
            self._submit(self._pending_chunks.popleft())

    def _publish_diagnostics(self) -> None:
        if self.loop is not None:
            self.loop.raise_failure("pd_tracker_node's control loop")
        now, ticks = time.perf_counter(), self._ticks_total
        rate = (ticks - self._window[0]) / max(1e-9, now - self._window[1])
        self._window = (ticks, now)
        with self._tracker_lock:
            info = self.tracker.diagnostics()
        self._report_path_aborts(info)
        counts = self.rejects.counts
        drops_total = (counts[StateDrop.OUT_OF_ORDER.value] + counts[StateDrop.FUTURE.value])
        dropped_states = drops_total - self._state_drops_reported
        self._state_drops_reported = drops_total
        silent_s = self._chunk_silence_s(info)
        status = DiagnosticStatus(name=f"{self.get_name()}: pd tracker", hardware_id="arm")
        mode = info["mode"]
        if mode == TrackerMode.FAULT.value and self.states.latest is None:
            status.level, status.message = DiagnosticStatus.WARN, "waiting for joint_states"
        elif mode == TrackerMode.FAULT.value:
            status.level, status.message = DiagnosticStatus.ERROR, f"fault: {info['fault']}"
        elif not self.tick_on_joint_states and rate < 0.9 * self.config.rate_hz:
            status.level = DiagnosticStatus.WARN
            status.message = f"loop at {rate:.0f} Hz, below {self.config.rate_hz:.0f} Hz"
        elif dropped_states:
            status.level = DiagnosticStatus.WARN
            status.message = (f"dropped {dropped_states} joint_states out of order or from "
                              "the future since the last report")
        elif silent_s is not None:
            status.level = DiagnosticStatus.WARN
            status.message = f"no chunks for {silent_s:.1f} s: holding"
        else:
            status.level, status.message = DiagnosticStatus.OK, mode
        assert self.clock_thread is not None  # made in __init__
        self.clock_thread.report(status)
        values = {
            "mode": mode,
            "scheduling": self.scheduling,
            "tick_source": "joint_states" if self.tick_on_joint_states else "timer",
            "loop_rate_hz": f"{rate:.1f}",
            "period_error_ms_p50": f"{self.period_error_ms.percentile(50):.4f}",
            "period_error_ms_p99": f"{self.period_error_ms.percentile(99):.4f}",
            "period_error_ms_max": f"{self.period_error_ms.max():.4f}",
            "tick_ms_p50": f"{self.tick_ms.percentile(50):.4f}",
            "tick_ms_p99": f"{self.tick_ms.percentile(99):.4f}",
            "efforts_sent": str(self._efforts_sent),
            "skipped_deadlines": str(self.loop.skipped_deadlines
                                     if isinstance(self.loop, PeriodicThread) else 0),
            "chunks_accepted": str(info["chunks_accepted"]),
            **{f"chunks_rejected_{r}": str(n) for r, n in info["chunks_rejected"].items()},
            "points_dropped": str(info["points_dropped"]),
            "holds": str(info["holds"]),
            "faults": str(info["faults"]),
            "effort_saturated_ticks": str(info["effort_saturated_ticks"]),
            "late_state_ticks": str(info["late_state_ticks"]),
            "path_aborts": str(info["path_aborts"]),
            "position_jumps": str(info["position_jumps"]),
            "overspeed_stops": str(info["overspeed_stops"]),
            **{drop.value: str(counts[drop.value]) for drop in StateDrop},
            "joint_states_time_resyncs": str(self.states.time_resyncs),
            "state_limited_ticks": str(info["state_limited_ticks"]),
            "publish_refused": str(self.publishing.refused_total),
        }
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self.publishing.publish(self.diag_pub, msg)

    def _chunk_silence_s(self, info: dict) -> float | None:
        """Seconds since the last accepted chunk when the tracker holds for want of
        chunks (a policy that stopped producing them); None otherwise."""
        last = self.tracker.timeline.last_arrival_s
        if info["mode"] != TrackerMode.HOLDING.value or not info["chunks_accepted"] \
                or not math.isfinite(last):
            return None
        silent_s = self._now_s() - last
        return silent_s if silent_s > self.config.chunk_timeout_s else None

    def _report_path_aborts(self, info: dict) -> None:
        """One line per diagnostics period in which the arm left its path: a WARN when it
        was blocked or pushed hard, an INFO when it was put elsewhere in one step (a
        simulator reset), which is how every simulated episode starts."""
        aborts, jumps = info["path_aborts"], info["position_jumps"]
        new_aborts = aborts - self._path_aborts_reported[0]
        new_jumps = jumps - self._path_aborts_reported[1]
        self._path_aborts_reported = (aborts, jumps)
        if new_aborts > new_jumps:
            self.get_logger().warning(
                f"arm farther than path_tolerance ({self.config.path_tolerance:g} rad) from "
                f"its reference {new_aborts - new_jumps} time(s): plan dropped, holding at "
                f"the measured state; chunks planned before it are skipped [{aborts} path "
                "aborts so far]")
        if new_jumps > 0:
            self.get_logger().info(
                f"arm put elsewhere {new_jumps} time(s) (moved farther in one step than it "
                "can move: a simulator reset): plan dropped, holding at the new state")


def main(args=None) -> None:
    run_node(PdTrackerNode, "pd_tracker_node", args)


if __name__ == "__main__":
    main()
