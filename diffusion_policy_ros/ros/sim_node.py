"""sim_node: the MuJoCo arm, table, objects and Kinect-like camera as ROS topics.

Thin adapter around ``sim.SimulationRuntime``: applies ``arm_controller/commands``
(6 efforts, N m) and ``gripper_controller/commands`` ([opening m]) to the physics,
publishes ``joint_states``, the camera topics of the Azure Kinect driver, the
episode's ``instruction`` and state (``sim/episode``, ``/diagnostics``) and, with
``publish_clock``, ``/clock``. ``~/reset`` (std_srvs/Trigger) starts the next episode;
``~/pause`` (std_srvs/SetBool) holds or resumes the physics, the camera and ``/clock``
(``start_paused`` holds them from start-up).

Instructions. The episode is scored against the object a person's instruction names
(``SimulationRuntime.follow_instruction``, the task generator's grammar), not only
the sim's own choice. With ``publish_instruction`` each episode starts with the sim's
own instruction and a person's replaces it until the next reset; without it the
episode waits for a person's instruction (``waiting_for_instruction``) and keeps the
last one across resets. At a reset the new episode's instruction, if any, is
published latched on ``instruction``, so policy_node restarts its history with the
episode (see Stamps). Words naming no object of the scene give
``no_target``: nothing is scored, lifting is no wrong object. After an episode ended,
an instruction starts the next episode in the scene as it is (no reset). The sim
hears instructions on ``policy/instruction`` (what policy_node took, from any
publisher) and from latched publishers on ``instruction`` directly; it deliberately
has no volatile subscription there, so ``ros2 topic pub --once`` (which publishes
as soon as one subscriber matches) waits for policy_node, the one that must get it.
An instruction longer than ``instruction_max_chars`` is refused whole (counted, one
WARN per 2 s) and the episode keeps its own; the lines about instructions are bounded
per second whatever their rate (``monitoring.LogBudget``), with a user's words cut
(``monitoring.excerpt``); the counts are on ``/diagnostics`` (``instructions_*``).
Hints name the resolved topic (``/cell1/instruction`` in namespace ``cell1``).

Episode reports. ``sim/episode`` is latched (transient local, depth 1) and published
whenever the status changes, so a late subscriber gets the latest: an episode's final
report (``success``, ``wrong_object``, ``timeout``) until the next episode starts (a
reset, or an instruction after the end).

Timing. The physics runs on a thread of its own (``realtime.MessageDrivenThread``)
that wakes for each arm command and otherwise every ``1 / real_time_factor`` physics
step of wall time (the steady clock, never the node's ROS clock: this node is the
clock source); it reads the gripper's commands on each wake-up too. The executor
keeps the rest (services, instructions, diagnostics) and shares the simulation with
that thread under one lock: at 500 Hz the executor's own wait-set rebuild and dispatch
per command and per timer tick cost more CPU than the step (docs/explanation/distillation.md). Each
turn steps as many 2 ms physics steps as ``real_time_factor`` x the wall time since
the last turn demands (at most ``max_catchup_s`` of sim time; a larger backlog is
dropped, counted, and the sim then runs slower than asked). Within a batch,
``joint_states`` go out every ``1 / joint_state_rate_hz``
of sim time and a camera frame whenever one is due (``camera_rate_hz`` of sim
time), so rates are exact in sim time and bursty at the callback scale.

Stamps. With ``publish_clock`` every stamp is the sim clock: episode time plus
an offset that makes it continuous and increasing across resets (a reset
takes one physics step; it never starts at 0, which ROS reads as "unset"), and
``/clock`` is published after each batch; on ``use_sim_time`` the node's own ROS
clock is set from each ``/clock`` it publishes, not read back over DDS
(``ros.sim_clock``). Without it, stamps are the node's ROS
clock, spread over the batch as if each step had happened at its real-time
pace (step k of n: now - (n - 1 - k) * dt / real_time_factor), and increasing.

Lockstep (``lockstep`` with ``publish_clock``). The physics and the arm controller
form one discrete loop, as in a simulator's synchronous mode: after publishing a
``joint_states`` the sim steps no further until the next arm command arrives (with
pd_tracker_node ticking on joint_states, that command answers exactly this state),
and steps as soon as it does, within the wall-clock pace. A busy machine then lowers
the achieved real-time factor (on ``/diagnostics``) instead of feeding the arm one
effort for a whole batch of steps, the zero-order hold whose delay made the loop
oscillate. No answer within ``lockstep_resend_s``
(a sample DDS lost) publishes the same ``joint_states`` again (counted; routine on a
loaded machine, so logged at INFO every ``RESEND_LOG_PERIOD_S`` at most). With no command
publisher, or none within ``lockstep_timeout_s`` of wall time, the sim free-runs
(counted, WARN) with expiring efforts, until commands return. When to step, ask again,
drop a twin answer or free-run is decided by ``sim.lockstep.LockstepHandshake``.

Camera. A due frame's geometry is captured in the loop at its instant and drawn,
converted and published by a render thread (``sim.render_thread``), so drawing never
stalls the lockstep; a reset waits until the last episode's frames are out.

Commands. A valid effort command applies until ``command_timeout_s`` of sim time
without a new one (sim time, so the timeout scales with ``real_time_factor``
like a tracker on ``use_sim_time``); then the arm gets zero effort, which the
firmware-style gravity compensation turns into a hold, and diagnostics WARN
"commands stale" until commands return. The gripper keeps its last opening.
Commands are read between step batches, hence ``max_catchup_s < command_timeout_s``.
Malformed commands (wrong length, NaN/inf, a multi-array layout other than one
dimension of the data's length) are rejected; efforts beyond the joint limits
and openings beyond the stroke are clamped by the scene. Both are counted per
reason on ``/diagnostics`` and logged throttled per reason. Rates on ``/diagnostics``
are per wall-clock second; ``real_time_factor`` there is the achieved one. A
``joint_states`` publish that blocks the loop for ``PUBLISH_STALL_S`` or more (the
transport, not load) is logged as an error, counted (``publish_stalls``) and WARNs; a
publish the middleware refuses is a dropped sample, logged and counted
(``publish_refused``; ``ros.publish_guard``).
"""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.time import Time
from rosgraph_msgs.msg import Clock as ClockMsg
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray, Header, String
from std_srvs.srv import SetBool, Trigger

from diffusion_policy_ros.control import PdTrackerConfig
from diffusion_policy_ros.control.publish_gates import RateGate
from diffusion_policy_ros.monitoring import (
    BlockingWatch,
    LogBudget,
    RateMeter,
    RollingStats,
    ThrottledReasons,
    excerpt,
)
from diffusion_policy_ros.ros.conversions import camera_info_msg, image_msg, ns_to_stamp
from diffusion_policy_ros.ros.lean_events import LeanEventsMixin
from diffusion_policy_ros.ros.node_main import run_node
from diffusion_policy_ros.ros.params import declare_config
from diffusion_policy_ros.ros.polled import PolledSubscription, WaitedSubscription
from diffusion_policy_ros.ros.publish_guard import PublishGuard
from diffusion_policy_ros.ros.realtime import GIL_SWITCH_INTERVAL_S, MessageDrivenThread
from diffusion_policy_ros.ros.sim_clock import (
    ClockThread,
    drop_time_source_subscription,
    ros_clock,
)
from diffusion_policy_ros.sim.camera import RgbdFrame
from diffusion_policy_ros.sim.lockstep import CommandVerdict, LockstepHandshake, TurnVerdict
from diffusion_policy_ros.sim.render_thread import RenderThread
from diffusion_policy_ros.sim.runtime import SimulationRuntime
from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES, JOINT_NAMES
from diffusion_policy_ros.sim.sim_config import SimConfig
from diffusion_policy_ros.sim.task import TaskState

#: Optical frame of the colour camera, as the Azure Kinect driver names it.
CAMERA_FRAME = "rgb_camera_link"
#: ``/diagnostics`` keys of the episode report entries that do not read well as episode_<key>.
_EPISODE_KEYS = {"episode": "episode", "sim_time_s": "sim_time_s"}
#: ``sim/episode`` statuses that end an episode.
TERMINAL = ("success", "wrong_object", "timeout")
#: A ``joint_states`` publish longer than this is the transport blocking the simulation,
#: not load: a descheduled thread on a saturated machine loses tens of ms, not this.
PUBLISH_STALL_S = 0.1
#: How often a joint_states published again in the lockstep (a lost DDS sample, routine on
#: a loaded machine) is logged (s); each is counted on /diagnostics.
RESEND_LOG_PERIOD_S = 30.0


def command_values(msg: Float64MultiArray, expected: int) -> tuple[np.ndarray | None, str, str]:
    """(values, '', '') of a ros2_control-style command, or (None, reason, detail).

    The layout may be empty (what ``JointGroupEffortController`` users send) or
    one dimension whose size is the data length, with no data offset.
    """
    data = np.asarray(msg.data, dtype=np.float64)
    dims = msg.layout.dim
    if msg.layout.data_offset or len(dims) > 1 or (dims and dims[0].size != data.size):
        layout = [(d.label, d.size, d.stride) for d in dims]
        return None, "bad_layout", (f"layout {layout} offset {msg.layout.data_offset} is not "
                                    f"one dimension of {data.size} values")
    if data.size != expected:
        return None, "wrong_length", f"{data.size} values, expected {expected}"
    if not np.all(np.isfinite(data)):
        return None, "non_finite", f"values {data.tolist()}"
    return data, "", ""


def episode_status(state: TaskState) -> str:
    if not state.has_target:
        return "no_target" if state.instruction.strip() else "waiting_for_instruction"
    if state.success:
        return "success"
    if state.wrong_object is not None:
        return "wrong_object"
    return "timeout" if state.timed_out else "running"


def episode_detail(state: TaskState, object_names=(), instruction_topic="/instruction",
                   ambiguity: str = "") -> str:
    """Why nothing is scored (empty while there is a target); ``instruction_topic``: the
    resolved name a person publishes on (the node's namespace, remaps); ``ambiguity``:
    which objects the words fit alike."""
    status = episode_status(state)
    if status == "waiting_for_instruction":
        return f"no instruction yet: publish one on '{instruction_topic}' (std_msgs/String)"
    if status == "no_target" and ambiguity:
        return (f"'{excerpt(state.instruction)}': {ambiguity}: nothing is scored until an "
                "instruction names one of them")
    if status == "no_target":
        names = ", ".join(n.replace("_", " ") for n in object_names)
        return (f"'{excerpt(state.instruction)}' names no object of the scene ({names}): "
                "nothing is scored until an instruction does")
    return ""


def episode_report(state: TaskState, episode: int, seed: int | None, sim_time_s: float,
                   object_names=(), instruction_topic="/instruction",
                   ambiguity: str = "") -> dict:
    """What ``sim/episode`` carries (as JSON) and ``/diagnostics`` repeats."""
    return {"episode": episode, "seed": seed, "status": episode_status(state),
            "target": state.target, "instruction": state.instruction,
            "success": state.success, "wrong_object": state.wrong_object or "",
            "timed_out": state.timed_out, "elapsed_s": round(state.elapsed_s, 4),
            "sim_time_s": round(sim_time_s, 4),
            "detail": episode_detail(state, object_names, instruction_topic, ambiguity)}


class SimNode(LeanEventsMixin, Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("sim_node", **kwargs)
        self.config: SimConfig = declare_config(self, SimConfig)
        cfg = self.config
        # The tracker inside the runtime is GraspEnv's; here pd_tracker_node sends efforts.
        # The camera is drawn by the render thread, off the lockstep loop.
        self.runtime = SimulationRuntime(cfg, tracker_config=PdTrackerConfig(), with_camera=False)
        scene = self.runtime.scene
        self.render: RenderThread | None = None
        self.dt = scene.timestep_s
        self._effort_limits = scene.effort_limits_nm
        self._gripper_range = scene.gripper_range_m
        self._zero_effort = np.zeros(len(ARM_JOINT_NAMES))
        # joint_states on the sim-time grid of joint_state_rate_hz.
        self._joint_state_gate = RateGate(cfg.joint_state_rate_hz)
        self._clock_period_s = 1.0 / cfg.clock_rate_hz
        self._next_clock_s = 0.0
        self._max_batch = max(1, int(round(cfg.max_catchup_s / self.dt)))
        self.rejects = ThrottledReasons(period_s=2.0)
        self.clamps = ThrottledReasons(period_s=2.0)
        self._stale_log = ThrottledReasons(period_s=2.0)
        self.rates = {name: RateMeter() for name in ("joint_states", "camera", "commands")}
        self.loop_ms = RollingStats(window=2000)
        self.publish_watch = BlockingWatch(PUBLISH_STALL_S)
        self._publish_log = ThrottledReasons(period_s=2.0)
        self.publishing = PublishGuard(self.get_logger(), self.context)

        # Episode and command state: the physics thread and the executor's callbacks
        # take turns under this lock (the render thread reads only its own frames).
        self._lock = threading.Lock()
        self.physics: MessageDrivenThread | None = None
        self._offset_s = 0.0
        self._episode = 0
        self._status = ""
        self._scored_since_wall: float | None = None  # monotonic s (see _publish_episode)
        self._effort: np.ndarray | None = None
        self._last_command_s: float | None = None
        self._stale = False
        self.command_timeouts = 0
        self._instruction = ""  # the last instruction heard (kept across resets)
        self._gripper_m = float(scene.joint_positions()[6])
        # Loop pacing and stamps.
        self._last_wall: float | None = None
        self._debt_s = 0.0
        self._last_stamp_ns = 0
        self._stamp_ns = 0
        self.steps_total = 0
        self.steps_dropped = 0
        self._window = (time.monotonic(), 0.0)
        # Lockstep: when to step, ask again, drop a twin answer or free-run.
        self.lockstep = LockstepHandshake(cfg.lockstep_timeout_s, cfg.lockstep_resend_s)
        #: A lost sample asked for again is routine under load: said once in a while.
        self._resend_log = ThrottledReasons(period_s=RESEND_LOG_PERIOD_S)
        # Instructions: refusals logged per reason, the rest within a budget of lines.
        self.instruction_counts = {key: 0 for key in ("received", "followed",
                                                      "refused_too_long", "repeated")}
        self._instruction_refusals = ThrottledReasons(period_s=2.0)
        self._instruction_lines = LogBudget(burst=5, period_s=1.0)
        self._last_joint_state: JointState | None = None
        self._paused = cfg.start_paused

        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        sensor_qos = QoSProfile(depth=5)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.joint_pub = self.create_publisher(JointState, "joint_states", QoSProfile(depth=10))
        self.color_pub = self.create_publisher(Image, "camera/rgb/image_raw", sensor_qos)
        self.depth_pub = self.create_publisher(Image, "camera/depth_to_rgb/image_raw", sensor_qos)
        self.info_pub = self.create_publisher(CameraInfo, "camera/rgb/camera_info", sensor_qos)
        self.instruction_pub = self.create_publisher(String, "instruction", latched)
        self.episode_pub = self.create_publisher(String, "sim/episode", latched)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", QoSProfile(depth=10))
        # Reliable depth 1 matches rclpy's / rclcpp's best-effort /clock subscriptions too.
        self.clock_pub = (self.create_publisher(ClockMsg, "/clock", QoSProfile(depth=1))
                          if cfg.publish_clock else None)
        # On sim time the node's own clock follows what it publishes, set here rather than
        # read back over DDS; following another source's /clock takes a thread.
        self.clock_thread: ClockThread | None = None
        self._sets_own_clock = cfg.publish_clock and drop_time_source_subscription(self)
        if not cfg.publish_clock:
            self.clock_thread = ClockThread(self)
        # Best effort: in the lockstep a lost command is asked for again (lockstep_resend_s);
        # a reliable reader would hold that answer back until DDS repaired the lost one.
        # It accepts every publisher's QoS, so it needs no incompatible-QoS report.
        self.commands = WaitedSubscription(
            self, Float64MultiArray, "arm_controller/commands",
            QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
        # Read by the physics thread on each wake-up: the tracker sends an opening whenever
        # it changes, up to every tick, and an executor wake-up for each costs the CPU the
        # polling saves.
        self.gripper_commands = PolledSubscription(
            self, Float64MultiArray, "gripper_controller/commands", QoSProfile(depth=1))
        # Transient local only (see the module docstring); volatile publishers it cannot
        # match are expected and not reported.
        quiet = SubscriptionEventCallbacks(incompatible_qos=lambda _event: None)
        heard = self.create_subscription(String, "instruction", self._on_instruction, latched,
                                         event_callbacks=quiet)
        self.instruction_topic = heard.topic_name
        self.create_subscription(String, "policy/instruction", self._on_instruction, latched)
        self.create_service(Trigger, "~/reset", self._on_reset)
        self.create_service(SetBool, "~/pause", self._on_pause)

        # The loop thread must get the GIL back soon after a command arrives, even while
        # the render thread runs Python (Python's default switch interval is 5 ms).
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        width, height = cfg.resolution
        self.render = RenderThread(scene.model, width, height, self._publish_frame)
        self._start_episode()
        self._turn_period_s = max(0.001, self.dt / cfg.real_time_factor)
        self.create_timer(cfg.diagnostics_period_s, self._publish_diagnostics, clock=self._steady)
        self.physics = MessageDrivenThread(self.commands, self._on_effort_locked, 0,
                                           "sim_physics", after_wake=self._turn,
                                           wait_s=self._wait_s)
        self.physics.start()
        if self.get_parameter("use_sim_time").value and not cfg.publish_clock:
            self.get_logger().warning(
                "use_sim_time is true but publish_clock is false: stamps follow an external "
                "/clock (the physics still paces itself on the wall clock)")
        self.get_logger().info(
            f"sim_node ready: {width}x{height} camera at {cfg.camera_rate_hz:.0f} Hz, "
            f"joint_states at {cfg.joint_state_rate_hz:.0f} Hz, real-time factor "
            f"{cfg.real_time_factor:g}, {'sim time on /clock' if cfg.publish_clock else 'ROS time'}"
            f" stamps")

    # -- clocks -------------------------------------------------------------------------------

    def sim_time_s(self) -> float:
        """Sim clock: continuous across episodes (the runtime's restarts at 0 each reset)."""
        return self._offset_s + self.runtime.time_s

    def _ros_stamp_ns(self, back_s: float = 0.0) -> int:
        ns = self.get_clock().now().nanoseconds - int(back_s * 1e9)
        ns = max(ns, self._last_stamp_ns + 1)
        self._last_stamp_ns = ns
        return ns

    def _stamp(self):
        if self.config.publish_clock:
            return ns_to_stamp(round(self.sim_time_s() * 1e9))
        return ns_to_stamp(self._stamp_ns)

    def _publish_clock(self, force: bool = False) -> None:
        """``/clock`` at most every ``1 / clock_rate_hz`` of sim time (``force``: now)."""
        if self.clock_pub is None:
            return
        now = self.sim_time_s()
        if not force and now < self._next_clock_s - 1e-9:
            return
        self._next_clock_s = now + self._clock_period_s
        msg = ClockMsg(clock=self._stamp())
        self.publishing.publish(self.clock_pub, msg)
        if self._sets_own_clock:
            ros_clock(self).set_ros_time_override(Time.from_msg(msg.clock))

    # -- episodes -----------------------------------------------------------------------------

    def _start_episode(self) -> None:
        # The last episode's frames go out before anything of the next one, and the
        # reset restarts the depth-noise stream the render thread draws from.
        assert self.render is not None  # made before the first episode
        self.render.drain()
        # One physics step after the previous episode's last instant (never 0 = "unset").
        self._offset_s = self.sim_time_s() + self.dt if self._episode else self.dt
        # The seed's own task, or the person's kept words resolved in the new layout.
        kept = None if self.config.publish_instruction else self._instruction
        state = self.runtime.reset(instruction=kept)
        self._episode += 1
        self._effort = None  # the arm was teleported home: efforts for the old pose are void
        self.lockstep.cancel()
        self._gripper_m = float(self.runtime.scene.joint_positions()[6])
        self._joint_state_gate.restart()
        self._status = ""
        self._scored_since_wall = None
        if not self.config.publish_clock:
            self._stamp_ns = self._ros_stamp_ns()
        # Clock, instruction, then the episode's first joint_states and frame:
        # policy_node restarts its history at its clock when the instruction arrives.
        # A kept instruction is published again for that, a sim's own one for the first time.
        self._publish_clock(force=True)
        if state.instruction:
            self.publishing.publish(self.instruction_pub, String(data=state.instruction))
        self._after_step(state)
        told = (f"'{excerpt(state.instruction)}' -> {state.target}" if state.has_target
                else self._detail(state))
        self.get_logger().info(f"episode {self._episode} (seed {self.runtime.episode_seed}): "
                               f"{told}")

    def _detail(self, state: TaskState) -> str:
        return episode_detail(state, self.runtime.scene.on_table_names, self.instruction_topic,
                              self.runtime.ambiguity)

    def _report(self, state: TaskState, sim_time_s: float) -> dict:
        return episode_report(state, self._episode, self.runtime.episode_seed, sim_time_s,
                              self.runtime.scene.on_table_names, self.instruction_topic,
                              self.runtime.ambiguity)

    def _on_instruction(self, msg: String) -> None:
        self.instruction_counts["received"] += 1
        if len(msg.data) > self.config.instruction_max_chars:
            self.instruction_counts["refused_too_long"] += 1
            if self._instruction_refusals.record("too_long", time.monotonic()):
                self.get_logger().warning(
                    f"instruction refused ({len(msg.data)} characters, more than "
                    f"instruction_max_chars {self.config.instruction_max_chars}): "
                    f"'{excerpt(msg.data)}'; the episode keeps its instruction "
                    f"[{self.instruction_counts['refused_too_long']} so far]")
            return
        with self._lock:
            self._follow_instruction(msg)

    def _log_instruction(self, line: str, warn: bool = False) -> None:
        """An instruction's log line, within a budget of lines a second whatever the rate."""
        left_out = self._instruction_lines.allow(time.monotonic())
        if left_out is None:
            return
        if left_out:
            line += f" [{left_out} lines about instructions left out]"
        # One call site per severity: rclpy refuses another severity at the same site.
        if warn:
            self.get_logger().warning(line)
        else:
            self.get_logger().info(line)

    def _follow_instruction(self, msg: String) -> None:
        text = " ".join(msg.data.split())  # as policy_node republishes it
        before = self.runtime.task_state
        if text == " ".join(before.instruction.split()) and not before.done:
            self.instruction_counts["repeated"] += 1
            return  # the same message again (from policy/instruction), or our own
        self.instruction_counts["followed"] += 1
        self._instruction = text
        state = self.runtime.follow_instruction(text)
        if before.done:
            self._episode += 1  # the next episode, in the scene as it is
        if state.has_target:
            self._log_instruction(f"episode {self._episode}: instruction '{excerpt(text)}' -> "
                                  f"{state.target}")
        else:
            self._log_instruction(f"episode {self._episode}: {self._detail(state)}", warn=True)
        self._status = episode_status(state)
        self._publish_episode(state)

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response):
        with self._lock:
            self._start_episode()
            state = self.runtime.task_state
            response.success = True
            response.message = (f"episode {self._episode} seed {self.runtime.episode_seed}: "
                                f"{state.instruction}")
        return response

    def _on_pause(self, request: SetBool.Request, response: SetBool.Response):
        if request.data != self._paused:
            with self._lock:
                self._paused = request.data
                # Pacing and the rate window restart: the paused wall time is neither
                # stepped afterwards nor reported as a real-time shortfall.
                self._last_wall, self._debt_s = None, 0.0
                self._window = (time.monotonic(), self.sim_time_s())
            assert self.physics is not None  # made in __init__
            self.physics.wake()  # resumed: the next turn is now, not after an idle wait
            self.get_logger().info("paused" if self._paused else "resumed")
        response.success = True
        response.message = "paused" if self._paused else "running"
        return response

    def _publish_episode(self, state: TaskState) -> None:
        """Publish the episode's report; a finished one carries ``wall_s``, this node's
        wall time from the start of scoring to the end, so that a real-time factor does not
        include the round trip of another process's reset or instruction (most of a second
        on a saturated machine)."""
        report = self._report(state, self.sim_time_s())
        now = time.monotonic()
        if report["status"] == "running":
            if self._scored_since_wall is None:
                self._scored_since_wall = now
        elif report["status"] in TERMINAL and self._scored_since_wall is not None:
            report["wall_s"] = round(now - self._scored_since_wall, 3)
            self._scored_since_wall = None
        else:
            self._scored_since_wall = None
        self.publishing.publish(self.episode_pub, String(data=json.dumps(report)))
        if report["status"] in TERMINAL:
            self.get_logger().info(f"episode {self._episode} ended: {report['status']} after "
                                   f"{state.elapsed_s:.2f} s")

    # -- commands -----------------------------------------------------------------------------

    def _reject(self, reason: str, message: str) -> None:
        if self.rejects.record(reason, time.monotonic()):
            self.get_logger().error(f"rejected {message} [{self.rejects.counts[reason]} so far]")

    def _clamped(self, reason: str, message: str) -> None:
        if self.clamps.record(reason, time.monotonic()):
            self.get_logger().warning(f"{message} [{self.clamps.counts[reason]} so far]")

    def _on_effort_locked(self, msg: Float64MultiArray) -> None:
        with self._lock:
            self._take_gripper()
            self._on_effort(msg)

    def _on_effort(self, msg: Float64MultiArray) -> None:
        values, reason, detail = command_values(msg, len(ARM_JOINT_NAMES))
        if values is None:
            self._reject(f"effort_{reason}", f"arm command ({reason}): {detail}")
            return
        low, high = self._effort_limits[:, 0], self._effort_limits[:, 1]
        if np.any(values < low) or np.any(values > high):
            self._clamped("effort_clamped", f"arm efforts {values.tolist()} clamped to the "
                          f"joint effort limits {high.tolist()} N m")
        now = time.monotonic()
        verdict = self.lockstep.on_command(values, now)
        if verdict is CommandVerdict.DUPLICATE:
            return
        self.rates["commands"].tick(now)
        self._effort = values
        self._last_command_s = self.sim_time_s()
        if self._stale:
            self._stale = False
            self.get_logger().debug("arm commands resumed")
        if verdict is CommandVerdict.RESUMED:
            self.get_logger().info("arm commands returned: lockstep resumed")
        elif verdict is CommandVerdict.ANSWER and not self._paused:
            self._accrue(now)
            self._step_lockstep()

    def _take_gripper(self) -> None:
        for msg in self.gripper_commands.take_all():
            self._on_gripper(msg)

    def _on_gripper(self, msg: Float64MultiArray) -> None:
        values, reason, detail = command_values(msg, 1)
        if values is None:
            self._reject(f"gripper_{reason}", f"gripper command ({reason}): {detail}")
            return
        opening = float(values[0])
        low, high = self._gripper_range
        if not low <= opening <= high:
            self._clamped("gripper_clamped", f"gripper opening {opening} m clamped to "
                          f"[{low}, {high}] m")
        self._gripper_m = opening

    def _applied_effort(self) -> np.ndarray:
        if self._last_command_s is not None and not self._stale and \
                self.sim_time_s() - self._last_command_s > self.config.command_timeout_s:
            self._stale = True
            self.command_timeouts += 1
            if self._stale_log.record("stale", time.monotonic()):
                self.get_logger().warning(
                    f"arm commands stale (none for {self.config.command_timeout_s} s of sim "
                    f"time): zero effort, gravity compensation holds the arm "
                    f"[{self.command_timeouts} so far]")
        if self._stale or self._effort is None:
            return self._zero_effort
        return self._effort

    # -- loop ---------------------------------------------------------------------------------

    def _lockstep_configured(self) -> bool:
        return self.config.lockstep and self.config.publish_clock

    def _lockstep_active(self) -> bool:
        return (self._lockstep_configured() and not self.lockstep.free_running
                and self.commands.subscription.get_publisher_count() > 0)

    def _wait_s(self) -> float:
        """How long the physics thread may sleep before its next turn (wall s)."""
        assert self.physics is not None  # its own thread asks
        return self.physics.idle_wait_s if self._paused else self._turn_period_s

    def _accrue(self, wall: float) -> int:
        """Add the wall time since the last turn to the step debt; the steps now due."""
        if self._last_wall is None:
            self._last_wall = wall
            return 0
        self._debt_s += (wall - self._last_wall) * self.config.real_time_factor
        self._last_wall = wall
        n = int(self._debt_s / self.dt + 1e-6)
        if n > self._max_batch:
            self.steps_dropped += n - self._max_batch
            self._debt_s -= (n - self._max_batch) * self.dt
            n = self._max_batch
        return n

    def _turn(self) -> None:
        """The physics thread's turn after each wake-up (a command's or its pace's)."""
        with self._lock:
            self._take_gripper()
            self._loop()

    def _loop(self) -> None:
        if self._paused:
            return
        wall = time.monotonic()
        n = self._accrue(wall)
        if n == 0:
            return
        if self._lockstep_active():
            self._step_lockstep()
            return
        self.lockstep.cancel()
        self._debt_s -= n * self.dt
        pace_s = self.dt / self.config.real_time_factor
        for k in range(n):
            if not self.config.publish_clock:
                self._stamp_ns = self._ros_stamp_ns((n - 1 - k) * pace_s)
            state = self.runtime.step(self._applied_effort(), self._gripper_m)
            self.steps_total += 1
            self._after_step(state)
        self._publish_clock()
        self.loop_ms.add((time.monotonic() - wall) * 1e3)

    def _step_lockstep(self) -> None:
        """Step while the pace allows, stopping at each joint_states until it is answered."""
        start = time.monotonic()
        if self.lockstep.awaiting:
            verdict = self.lockstep.on_turn(start)
            if verdict is TurnVerdict.ASK_AGAIN:
                # DDS can lose a sample even on a reliable topic (measured here while the
                # camera's images flow) and repairs it only when a later sample reveals the
                # gap; in a lockstep nothing later comes, so the state is published again.
                self._publish_watched(self._last_joint_state)
                if self._resend_log.record("resend", start):
                    self.get_logger().info(
                        f"lockstep: no arm command {self.config.lockstep_resend_s * 1e3:.0f} ms "
                        f"after a joint_states; published it again (a sample DDS lost, or a "
                        f"controller late on a loaded machine: routine, counted as "
                        f"lockstep_resends) [{self.lockstep.resends} so far]")
            elif verdict is TurnVerdict.TIMED_OUT:
                self.get_logger().warning(
                    f"lockstep: no arm command within lockstep_timeout_s "
                    f"({self.config.lockstep_timeout_s} s wall) of a joint_states; free-running "
                    f"with expiring efforts until commands return "
                    f"[{self.lockstep.timeouts} so far]")
            return
        stepped = False
        while self._debt_s + 1e-9 >= self.dt:
            state = self.runtime.step(self._applied_effort(), self._gripper_m)
            self._debt_s -= self.dt
            self.steps_total += 1
            stepped = True
            if self._after_step(state):
                self.lockstep.asked(time.monotonic())
                break
        if stepped:
            self._publish_clock()
            self.loop_ms.add((time.monotonic() - start) * 1e3)

    def _after_step(self, state: TaskState) -> bool:
        """Publish what is due after a physics step; True when joint_states went out."""
        now = self.sim_time_s()
        published = self._joint_state_gate.due(now)
        if published:
            self._publish_joint_states()
        if self.runtime.frame_due():
            time_s = self.runtime.schedule_frame()
            assert self.render is not None  # made in __init__
            self.render.submit(self.runtime.scene.data, (time_s, self._stamp()))
        status = episode_status(state)
        if status != self._status:
            self._status = status
            self._publish_episode(state)
            if state.done and self.config.auto_reset:
                self._start_episode()
                return False
        return published

    def _publish_joint_states(self) -> None:
        scene = self.runtime.scene
        msg = JointState(name=list(JOINT_NAMES))
        msg.header.stamp = self._stamp()
        msg.position = scene.joint_positions().tolist()
        msg.velocity = scene.joint_velocities().tolist()
        msg.effort = scene.joint_efforts().tolist()
        self._publish_watched(msg)
        self._last_joint_state = msg
        self.rates["joint_states"].tick(time.monotonic())

    def _publish_watched(self, msg: JointState) -> None:
        """Publishes joint_states and reports a publish that blocked: the sim cannot step
        meanwhile, so every subscriber's states go stale (the tracker faults); say so
        where it starts."""
        start_s = time.perf_counter()
        self.publishing.publish(self.joint_pub, msg)
        took_s = time.perf_counter() - start_s
        if self.publish_watch.note(took_s) and self._publish_log.record("stall",
                                                                         time.monotonic()):
            self.get_logger().error(
                f"publishing joint_states blocked the simulation for {took_s:.2f} s: DDS "
                f"could not hand the message over (e.g. a subscriber process that died "
                f"mid-transfer) [{self.publish_watch.stalls} so far]")

    def _publish_frame(self, token: tuple, rgbd: RgbdFrame) -> None:
        """On the render thread: the drawn frame as the Kinect driver's three topics."""
        time_s, stamp = token
        frame = self.runtime.finish_frame(time_s, rgbd)
        header = Header(stamp=stamp, frame_id=CAMERA_FRAME)
        self.publishing.publish(self.info_pub, camera_info_msg(frame.camera, header))
        self.publishing.publish(self.color_pub, image_msg(frame.color, header))
        self.publishing.publish(self.depth_pub, image_msg(frame.depth, header))
        self.rates["camera"].tick(time.monotonic())

    # -- diagnostics --------------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        assert self.physics is not None  # made in __init__
        self.physics.raise_failure("sim_node's physics thread")
        with self._lock:
            self._publish_diagnostics_locked()

    def _publish_diagnostics_locked(self) -> None:
        cfg = self.config
        assert self.render is not None  # made in __init__
        wall, sim = time.monotonic(), self.sim_time_s()
        wall0, sim0 = self._window
        self._window = (wall, sim)
        rtf = (sim - sim0) / max(1e-9, wall - wall0)
        rates = {name: meter.rate_hz(wall) for name, meter in self.rates.items()}
        state = self.runtime.task_state
        report = self._report(state, sim)
        problems = []
        if self._stale:
            assert self._last_command_s is not None  # stale after a command
            age = sim - self._last_command_s
            problems.append(f"commands stale ({age:.2f} s without an arm command): holding")
        if rtf < 0.9 * cfg.real_time_factor:
            problems.append(f"real-time factor {rtf:.2f}, below {cfg.real_time_factor:g}")
        publish_max_s = self.publish_watch.take_max_s()
        if publish_max_s >= PUBLISH_STALL_S:
            problems.append(f"a joint_states publish blocked for {publish_max_s:.2f} s")
        status = DiagnosticStatus(name=f"{self.get_name()}: simulation", hardware_id="sim")
        if self._paused:
            status.level, status.message = DiagnosticStatus.OK, "paused (~/pause resumes)"
        elif problems:
            status.level, status.message = DiagnosticStatus.WARN, "; ".join(problems)
        elif self._last_command_s is None:
            status.level, status.message = DiagnosticStatus.OK, "no arm commands yet: holding"
        else:
            status.level, status.message = DiagnosticStatus.OK, f"episode {report['status']}"
        if self.clock_thread is not None:
            self.clock_thread.report(status)
        command_age = "nan" if self._last_command_s is None else f"{sim - self._last_command_s:.4f}"
        values = {
            **{_EPISODE_KEYS.get(k, f"episode_{k}"): v if isinstance(v, str) else json.dumps(v)
               for k, v in report.items()},
            "episode_time_s": f"{self.runtime.time_s:.4f}",
            "real_time_factor": f"{rtf:.3f}",
            "real_time_factor_target": f"{cfg.real_time_factor:g}",
            "paused": str(self._paused).lower(),
            **{f"{name}_rate_hz": f"{r:.1f}" for name, r in rates.items()},
            "steps_total": str(self.steps_total),
            "steps_dropped": str(self.steps_dropped),
            "loop_ms_p50": f"{self.loop_ms.percentile(50):.3f}",
            "loop_ms_p99": f"{self.loop_ms.percentile(99):.3f}",
            "render_ms_p50": f"{self.render.frame_ms.percentile(50):.3f}",
            "render_ms_p99": f"{self.render.frame_ms.percentile(99):.3f}",
            "render_blocked": str(self.render.blocked),
            "commands_stale": str(self._stale).lower(),
            "command_age_s": command_age,
            "command_timeouts": str(self.command_timeouts),
            "joint_states_publish_ms_max": f"{publish_max_s * 1e3:.3f}",
            "publish_stalls": str(self.publish_watch.stalls),
            "publish_refused": str(self.publishing.refused_total),
            "lockstep": ("off" if not self._lockstep_configured()
                         else "free_run" if self.lockstep.free_running else "on"),
            "lockstep_timeouts": str(self.lockstep.timeouts),
            "lockstep_resends": str(self.lockstep.resends),
            "lockstep_duplicates": str(self.lockstep.duplicates),
            "lockstep_wait_ms_p50": f"{self.lockstep.wait_ms.percentile(50):.3f}",
            "lockstep_wait_ms_p99": f"{self.lockstep.wait_ms.percentile(99):.3f}",
            "gripper_target_m": f"{self._gripper_m:.4f}",
            **{f"instructions_{key}": str(n) for key, n in self.instruction_counts.items()},
            "instruction_lines_left_out": str(self._instruction_lines.left_out),
            **{f"rejected_{r}": str(n) for r, n in sorted(self.rejects.counts.items())},
            **{r: str(n) for r, n in sorted(self.clamps.counts.items())},
        }
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = (self._stamp() if cfg.publish_clock
                            else self.get_clock().now().to_msg())
        self.publishing.publish(self.diag_pub, msg)

    def destroy_node(self):
        physics = getattr(self, "physics", None)  # absent when the parameters were invalid
        if physics is not None:
            physics.stop()
            self.commands.destroy()
        render = getattr(self, "render", None)
        if render is not None:
            render.close()
        runtime = getattr(self, "runtime", None)
        if runtime is not None:
            runtime.close()
        clock_thread = getattr(self, "clock_thread", None)
        if clock_thread is not None:
            clock_thread.stop()
        return super().destroy_node()


def main(args=None) -> None:
    run_node(SimNode, "sim_node", args)


if __name__ == "__main__":
    main()
