"""policy_node: synchronized observations + instruction -> diffusion-policy action chunks.

Thin lifecycle adapter around ``policy.runner.PolicyRunner`` and
``policy.observation_history.ObservationHistory``:

- configure: load ``checkpoint`` on ``device`` at ``precision`` and warm up (so
  the first real chunk is as fast as the rest). Any failure (checkpoint
  missing / corrupt / for other joints, device unavailable, torch_npu absent)
  is logged and returns FAILURE; the node stays unconfigured and alive.
- activate: act. deactivate: stop publishing chunks. cleanup: drop the model.
- ``~/stop`` (std_srvs/Trigger) pauses acting; ``~/start`` resumes it and,
  where needed, configures and activates first. ``autostart`` does the same
  at start-up (plain ``ros2 run``, in-process bring-up).

Subscribes ``observation/image`` + ``observation/points`` (paired by exact
stamp; taken on a thread of their own as soon as they are queued,
``ros.polled.WaitedSubscriptions``), ``joint_states`` (polled, ``ros.polled``: the
inference worker takes the queued states every ``JOINT_STATES_TAKE_PERIOD_S`` while
it waits and before each chunk, not one executor wake-up per 500 Hz message, and not
fifty of them on the way from a frame to its chunk) and ``instruction`` (reliable;
transient local for a latched publisher that was there first and volatile for
``ros2 topic pub``, see ``ros/latched.py``) and republishes each instruction it takes on
``policy/instruction`` (reliable, transient local): what the policy acts on, for
the simulation's scoring and for operators. A tick (``tick_source``: by default
the frame that completes an image + cloud pair, ``rate_hz`` of them a second on
the frames' stamps, ``perception.frame_schedule``; or a ``rate_hz`` timer) selects To
frames one ``action_dt_s`` apart, runs the policy and publishes
``policy/action_chunk`` (``header.stamp`` = the newest observation's stamp,
point k at k * dt, joint_names + gripper_joint), ``policy/markers``
(end-effector path from the forward kinematics of the URDF, ``urdf_file`` or the
packaged arm, in ``base_frame``; no MuJoCo on the robot) and ``/diagnostics``.
It refuses to act, says why on ``/diagnostics`` and in a log throttled per
reason, without an instruction, with observations or joint_states older than
``max_obs_age_s``, with NaN/inf inputs or outputs. Every instruction taken (the same
words again too) starts a new task: the observation history restarts at the node's
clock (inputs stamped earlier are dropped) and a chunk still computing from older
frames is discarded (``discarded_after_restart``): after a simulated reset the first
chunks see only the new episode, padded from its first frame as in training; until
that first frame pairs (at most ``max_obs_age_s``) the ``no_observation`` refusal is
counted but not logged as a warning. Instructions are taken by the inference worker
(``policy.language.InstructionInbox``): one longer than ``instruction_max_chars`` is
refused whole (one WARN per 2 s, counted) and the current one stays; after a burst of
three, a new task starts at most every ``instruction_min_interval_s``, and what comes
faster is coalesced to the newest words (counted). Were every message of a flood to
restart the history, no frame would stay long enough to act on; coalesced, a flood costs
a length check per message and the chunks keep their rate. Instruction counts
(``instructions_received`` / ``_taken`` / ``_refused_too_long`` / ``_coalesced``) are on
``/diagnostics``; a user's words go into the log cut to ``monitoring.excerpt``. A gripper that
closed on nothing is re-opened for a moment (``grasp_retry.*``,
``policy.grasp_retry.EmptyGraspRetry``; counted in ``grasp_retries_total``), so the
policy grasps again; a grasp that stalled wide on the table (a cube held across its
corners) is lifted (``grasp_lift.*``, ``policy.grasp_lift.StalledGraspLift``, on the
URDF's kinematics; ``grasp_lifts_total``), which the policy itself never does. Each
re-opening and lift is logged at INFO (a lift whose path cannot be solved at WARN): an
arm or gripper motion the policy did not command; a few per task at most.

Threading: inference runs on the node's own worker thread, never on the executor's: the
frame handlers (on the observation thread) and the ``rate_hz`` timer (its own callback
group; with observation ticks it ticks only when frames stop, counted as
``watchdog_ticks``) only mark a chunk as due and the worker computes and publishes it,
so subscriptions, services and diagnostics keep running while the policy computes, under
the single-threaded executor of ``ros2 run`` as under a bring-up's multi-threaded one. A
tick that finds the previous chunk still computing is counted (``overrun_ticks``) and
coalesced. A new instruction is taken and embedded on the worker too (a cache miss runs
the sentence encoder), before the next chunk, and so is the image of a frame that will start
a chunk when it comes before its cloud (``rgbd_sync_node`` sends it ahead): the chunk
then runs only the cloud's encoder and the head (``PolicyRunner.encode_image_ahead``).
Measured on the 2-core machine, this node keeps its chunk rate on a fraction of a core,
while spinning it in rclpy's MultiThreadedExecutor with one callback group per role took
several times the CPU and fell far short of the rate (its Python dispatch loop competes
for the GIL and busy-waits on busy groups; figures in docs/benchmarks.md, "Measurements
behind the code's design").
Lifecycle transitions run on the executor thread: configure (load + warm-up, seconds)
holds the executor's messages (instruction, services) in their queues meanwhile. The
observation history and the language cache are thread-safe; everything else the worker
reads is swapped atomically.

Priority (``niceness``, -10 in config/policy_node.yaml): every thread of the node runs
ahead of normal-priority work, so on a busy machine a chunk is computed in one go
rather than in slices between a simulation's, a recorder's and a sync node's wake-ups
(figures in docs/lightdp.md); pd_tracker_node's SCHED_FIFO loop still comes first.
``inference_priority`` (off by default) puts the inference thread alone under SCHED_FIFO,
below the tracker: its chunks stop waiting for time slices, at the cost of whatever
shares the cores with it (docs/lightdp.md, twenty-eighth session).
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Point
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import Image, JointState, PointCloud2
from std_msgs.msg import ColorRGBA, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
from visualization_msgs.msg import Marker, MarkerArray

from diffusion_policy_ros.description import URDF_PATH
from diffusion_policy_ros.monitoring import RateMeter, RollingStats, ThrottledReasons, excerpt
from diffusion_policy_ros.perception.frame_schedule import FrameRateSchedule
from diffusion_policy_ros.perception.image_decoding import FrameRejected, decode_color
from diffusion_policy_ros.policy.checkpoint import CheckpointError
from diffusion_policy_ros.policy.devices import DeviceUnavailableError
from diffusion_policy_ros.policy.grasp_recovery import GraspRecovery
from diffusion_policy_ros.policy.kinematics import urdf_kinematics
from diffusion_policy_ros.policy.language import InstructionInbox
from diffusion_policy_ros.policy.node_config import PolicyNodeConfig
from diffusion_policy_ros.policy.observation_history import (
    NO_OBSERVATION,
    ObservationHistory,
    Refusal,
)
from diffusion_policy_ros.policy.runner import PolicyRunner
from diffusion_policy_ros.policy.runtime_backends import BackendError
from diffusion_policy_ros.ros.conversions import (
    ns_to_stamp,
    raw_image,
    stamp_to_ns,
    xyzrgb_from_cloud_msg,
)
from diffusion_policy_ros.ros.latched import subscribe_any_durability
from diffusion_policy_ros.ros.lean_events import LeanEventsMixin
from diffusion_policy_ros.ros.node_main import run_node
from diffusion_policy_ros.ros.params import declare_config
from diffusion_policy_ros.ros.polled import (
    IncompatiblePublisherCheck,
    PolledSubscription,
    WaitedSubscriptions,
)
from diffusion_policy_ros.ros.publish_guard import PublishGuard
from diffusion_policy_ros.ros.realtime import (
    MessageDrivenThread,
    request_fifo_priority,
    request_niceness,
)
from diffusion_policy_ros.ros.sim_clock import ClockThread

#: Runner stages reported on /diagnostics (``PolicyRunner.last_timings_ms`` keys).
STAGES = ("language", "rgb_encoder", "point_encoder", "grounding", "tool_target",
          "image_encoder", "cloud_encoder", "proprio_encoder", "fusion", "denoiser_step",
          "sampler")
_SUCCESS, _FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
#: joint_states kept between two takes: 0.4 s at 500 Hz.
JOINT_STATE_QUEUE_DEPTH = 200
#: How often the idle inference worker takes the queued joint_states (s): about ten at a
#: time at 500 Hz, so the take before a chunk is short.
JOINT_STATES_TAKE_PERIOD_S = 0.02


def no_instruction_hint(topic: str) -> str:
    """What to do without an instruction; ``topic``: the subscription's resolved name (in
    the node's namespace, after remaps), so the command works as printed."""
    return (f"no instruction yet: publish one on '{topic}' (std_msgs/String), e.g. "
            f"ros2 topic pub --once --keep-alive 2 {topic} std_msgs/msg/String "
            "\"{data: 'pick up the red cube'}\"")


def duration_msg(seconds: float) -> Duration:
    ns = int(round(seconds * 1e9))
    return Duration(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


class PolicyNode(LeanEventsMixin, LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("policy_node", **kwargs)
        self.config: PolicyNodeConfig = declare_config(self, PolicyNodeConfig)
        cfg = self.config
        problem = request_niceness(cfg.niceness)
        self.scheduling = f"niceness {os.getpriority(os.PRIO_PROCESS, 0)}"
        if cfg.niceness and problem:
            self.get_logger().warning(f"niceness: {problem}; running as started "
                                      f"({self.scheduling}): chunks share the CPU evenly")
        self.clock_thread = ClockThread(self)
        self.joint_names = cfg.action_joint_names
        self.history = ObservationHistory(self.joint_names, keep_s=cfg.max_obs_age_s + 1.0)
        self.refusals = ThrottledReasons(period_s=2.0)
        self.input_rejects = ThrottledReasons(period_s=2.0)
        self.instructions = InstructionInbox(cfg.instruction_max_chars,
                                             cfg.instruction_min_interval_s)
        self.instruction_log = ThrottledReasons(period_s=2.0)
        self.publishing = PublishGuard(self.get_logger(), self.context)
        # Chunks per second of the node's clock (sim time under use_sim_time: the rate
        # timer runs on it) and of the wall clock.
        self.chunk_rate = RateMeter()
        self.chunk_rate_wall = RateMeter()
        self.stage_ms = {name: RollingStats()
                         for name in (*STAGES, "image_encoder_ahead", "predict", "tick")}
        self.observation_age_ms = RollingStats()
        #: Worst age of a chunk's newest observation when its computation began: what the
        #: max_obs_age_s refusal bounds, measured where it is decided (receive times
        #: downstream also hold every delay of the receiving process).
        self.observation_age_at_start_ms_max = 0.0
        self.history_offset_ms = RollingStats()
        self.history_short = 0
        # Swapped atomically between threads (plain attribute assignment).
        self.runner: PolicyRunner | None = None
        self._fk = None
        self._state = "unconfigured"
        self._stopped = False
        self._instruction = ""
        self._chunk_instruction = ""
        self._refusal: Refusal | None = None
        self._error = ""
        self._first_chunk_ms: float | None = None
        self._warmup_ms: list[float] = []
        self._times_from_start: list[Duration] = []
        # Work handed to the inference worker.
        self.overrun_ticks = 0
        self.watchdog_ticks = 0
        self.frame_ticks = (FrameRateSchedule(cfg.rate_hz) if cfg.tick_source == "observation"
                            else None)
        self._last_tick_mark_ns: int | None = None  # node clock
        self.discarded_after_restart = 0
        self.grasp_recovery: GraspRecovery | None = None  # made by configure
        self._noise = None  # noise_stream of the current task when `seed` >= 0
        self._noise_generation = -1
        self._retry_generation = -1  # the history generation grasp_recovery's task belongs to
        self._work = threading.Condition()
        self._tick_due = False
        self._image_due: np.ndarray | None = None
        self.images_encoded_ahead = 0
        self._closing = False

        self._inference_group = MutuallyExclusiveCallbackGroup()
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        observation = [PolledSubscription(self, msg_type, topic, QoSProfile(depth=5))
                       for msg_type, topic in ((Image, "observation/image"),
                                               (PointCloud2, "observation/points"))]
        self.observation_topics = WaitedSubscriptions(
            self, dict(zip(observation, (self._on_image, self._on_points), strict=True)))
        self.observation_qos_check = IncompatiblePublisherCheck(self, observation)
        # Takes come every JOINT_STATES_TAKE_PERIOD_S and before every chunk; the depth
        # leaves room for a long chunk.
        self.joint_states = PolledSubscription(self, JointState, "joint_states",
                                               QoSProfile(depth=JOINT_STATE_QUEUE_DEPTH))
        _, live = subscribe_any_durability(self, String, "instruction", self._on_instruction)
        self.no_instruction = no_instruction_hint(live.topic_name)
        self.instruction_pub = self.create_publisher(String, "policy/instruction", latched)
        # Lifecycle publishers: silent unless the node is active.
        self.chunk_pub = self.create_lifecycle_publisher(JointTrajectory, "policy/action_chunk",
                                                         QoSProfile(depth=2))
        self.marker_pub = self.create_lifecycle_publisher(MarkerArray, "policy/markers",
                                                          QoSProfile(depth=1))
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", QoSProfile(depth=10))
        self.create_service(Trigger, "~/start", self._on_start)
        self.create_service(Trigger, "~/stop", self._on_stop)
        self.create_timer(1.0 / cfg.rate_hz, self._on_rate_timer,
                          callback_group=self._inference_group)
        self.create_timer(cfg.diagnostics_period_s, self._publish_diagnostics, clock=steady)
        self._worker = threading.Thread(target=self._inference_loop, name="policy_inference",
                                        daemon=True)
        self._worker.start()
        self.observation_thread = MessageDrivenThread(
            self.observation_topics, self._on_observation_message, 0, "policy_observations")
        self.observation_thread.start()
        problem = request_fifo_priority(cfg.inference_priority, self._worker.native_id)
        if not problem:
            self.scheduling += f", inference thread SCHED_FIFO {cfg.inference_priority}"
        elif cfg.inference_priority:
            self.get_logger().warning(f"inference_priority: {problem}; the inference thread "
                                      f"runs at the node's {self.scheduling}")
        if cfg.autostart:
            self._autostart_timer = self.create_timer(0.0, self._autostart, clock=steady)
        self.get_logger().info(
            f"policy_node up ({'autostart' if cfg.autostart else 'waiting for configure'}): "
            f"checkpoint '{cfg.checkpoint}', device {cfg.device}, {cfg.precision}, "
            f"{cfg.rate_hz:g} Hz, max observation age {cfg.max_obs_age_s:g} s, "
            f"{self.scheduling}")

    # -- lifecycle ----------------------------------------------------------------------------

    def _autostart(self) -> None:
        self._autostart_timer.cancel()
        self.destroy_timer(self._autostart_timer)
        if self.trigger_configure() != _SUCCESS:
            self.get_logger().error("autostart: configure failed (see above); the node stays "
                                    "unconfigured. Fix the parameters and restart it, or call "
                                    "~/start or ~/change_state configure")
            return
        if self.trigger_activate() != _SUCCESS:
            self.get_logger().error("autostart: activate failed")

    def _fail(self, message: str) -> TransitionCallbackReturn:
        self._error = message
        self.get_logger().error(f"configure failed: {message}")
        return _FAILURE

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        cfg = self.config
        if not cfg.checkpoint:
            return self._fail("parameter 'checkpoint' is empty: set it to a checkpoint "
                              "directory written by dpr train (-p checkpoint:=/path/to/ckpt)")
        t0 = time.perf_counter()
        try:
            runner = PolicyRunner.from_checkpoint(
                cfg.checkpoint, joint_names=self.joint_names, device=cfg.device,
                precision=cfg.precision, num_inference_steps=cfg.num_inference_steps or None,
                num_samples=cfg.num_samples or None,
                num_threads=cfg.num_threads or None, backend=cfg.backend,
                graph_dir=cfg.graph_dir or None)
        except (CheckpointError, DeviceUnavailableError, BackendError, ValueError) as exc:
            return self._fail(f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - configure must fail, never crash the node
            return self._fail(f"cannot load checkpoint '{cfg.checkpoint}' on device "
                              f"'{cfg.device}' ({type(exc).__name__}: {exc})")
        load_ms = (time.perf_counter() - t0) * 1e3
        fk, problem = self._load_fk() if cfg.publish_markers or cfg.grasp_lift.enabled \
            else (None, "")
        if fk is None and cfg.grasp_lift.enabled:
            return self._fail(f"grasp_lift.enabled needs the arm's kinematics: {problem} "
                              f"(or set grasp_lift.enabled:=false)")
        warmup = []
        try:
            for i in range(cfg.warmup_iterations):
                t = time.perf_counter()
                runner.warmup(cfg.warmup_instruction, iterations=1, seed=i)
                warmup.append((time.perf_counter() - t) * 1e3)
            if self._instruction:
                runner.language.embed(self._instruction)
        except Exception as exc:  # noqa: BLE001
            return self._fail(f"warm-up failed ({type(exc).__name__}: {exc})")
        c = runner.config
        self._times_from_start = [duration_msg(k * c.action_dt_s) for k in range(c.horizon)]
        self.history.keep_s = max(self.history.keep_s,
                                  (c.n_obs_steps - 1) * c.action_dt_s + cfg.max_obs_age_s + 0.5)
        if fk is None and cfg.publish_markers:
            self.get_logger().warning(f"policy/markers disabled: {problem}")
        self._fk = fk if cfg.publish_markers else None
        self.grasp_recovery = GraspRecovery(cfg.grasp_retry, cfg.grasp_lift, fk,
                                            c.action_dt_s)
        self._retry_generation = -1
        self._warmup_ms = warmup
        self._first_chunk_ms = None
        self._error = ""
        self.runner = runner
        self._state = "inactive"
        steps = runner.num_inference_steps
        self.get_logger().info(
            f"configured: {cfg.checkpoint} on {runner.device} ({cfg.precision}, "
            f"{runner.backend.name}), To {c.n_obs_steps} x {c.action_dt_s:g} s, T {c.horizon}, "
            f"{steps} {c.sampler} steps x K {runner.num_samples}; loaded "
            f"in {load_ms:.0f} ms, warm-up chunks {', '.join(f'{w:.0f}' for w in warmup)} ms")
        return _SUCCESS

    def _load_fk(self):
        """(the URDF's chain root -> joint_names -> tool_link, "") or (None, why not)."""
        cfg = self.config
        try:
            return urdf_kinematics(cfg.urdf_file or URDF_PATH, cfg.joint_names,
                                   cfg.tool_link), ""
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            return None, (f"cannot read the arm's kinematics from "
                          f"'{cfg.urdf_file or URDF_PATH}' ({type(exc).__name__}: {exc})")

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stopped = False
        self._first_chunk_ms = None
        self._state = "active"
        waiting = "" if self._instruction else " once an instruction comes"
        self.get_logger().info(f"active: acting at {self.config.rate_hz:g} Hz{waiting}")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._state = "inactive"
        self.get_logger().info("inactive: no more action chunks")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.runner, self._fk, self._state = None, None, "unconfigured"
        return _SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.runner, self._fk, self._state = None, None, "finalized"
        return _SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.get_logger().error(f"lifecycle error from state '{state.label}': model released")
        self.runner, self._fk, self._state = None, None, "unconfigured"
        return _SUCCESS

    def _on_start(self, request: Trigger.Request, response: Trigger.Response):
        if self._state == "unconfigured" and self.trigger_configure() != _SUCCESS:
            response.success, response.message = False, f"configure failed: {self._error}"
            return response
        if self._state == "inactive" and self.trigger_activate() != _SUCCESS:
            response.success, response.message = False, "activate failed"
            return response
        if self._state != "active":
            response.success = False
            response.message = f"cannot start from lifecycle state '{self._state}'"
            return response
        self._stopped = False
        response.success, response.message = True, "acting"
        self.get_logger().info("~/start: acting")
        return response

    def _on_stop(self, request: Trigger.Request, response: Trigger.Response):
        self._stopped = True
        response.success, response.message = True, f"stopped (lifecycle state '{self._state}')"
        self.get_logger().info("~/stop: no more action chunks until ~/start")
        return response

    # -- inputs -------------------------------------------------------------------------------

    def _reject_input(self, reason: str, message: str) -> None:
        if self.input_rejects.record(reason, time.monotonic()):
            self.get_logger().error(f"{message} [{self.input_rejects.counts[reason]} so far]")

    def _on_observation_message(self, taken) -> None:
        handler, msg = taken
        try:
            handler(msg)
        except Exception as exc:  # noqa: BLE001 - a bad message must never stop the thread
            self._reject_input("internal_error", f"ignored {type(msg).__name__}: "
                                                 f"{type(exc).__name__}: {exc}")

    def _on_image(self, msg: Image) -> None:
        try:
            rgb = decode_color(raw_image(msg))
        except FrameRejected as exc:
            self._reject_input(f"image_{exc.reason}", f"ignored observation/image: {exc}")
            return
        stamp_ns = stamp_to_ns(msg.header.stamp)
        if self.history.add_image(stamp_ns, rgb):
            self._on_frame(stamp_ns)
        else:
            self._encode_ahead(stamp_ns, rgb)

    def _on_points(self, msg: PointCloud2) -> None:
        try:
            points, colors = xyzrgb_from_cloud_msg(msg)
        except ValueError as exc:
            self._reject_input("bad_points", f"ignored observation/points: {exc}")
            return
        stamp_ns = stamp_to_ns(msg.header.stamp)
        if self.history.add_points(stamp_ns, points, colors):
            self._on_frame(stamp_ns)

    def _on_frame(self, stamp_ns: int) -> None:
        """A complete observation: with tick_source observation, start a chunk if due."""
        if self.frame_ticks is None:
            return
        with self._work:
            due = self.frame_ticks.on_frame(stamp_ns)
        if due:
            self._mark_tick_due()

    def _encode_ahead(self, stamp_ns: int, rgb: np.ndarray) -> None:
        """The image of a frame whose cloud is still on its way and which will start a
        chunk: the worker encodes it now, so the chunk waits for the cloud's half only."""
        if self.frame_ticks is None or self.runner is None or not self._acting():
            return
        with self._work:
            if self.frame_ticks.would_take(stamp_ns):
                self._image_due = rgb
                self._work.notify()

    def _take_joint_states(self) -> None:
        """Move the queued joint_states into the history (on any thread; it locks)."""
        for msg in self.joint_states.take_all():
            stamp_ns = stamp_to_ns(msg.header.stamp) or self.get_clock().now().nanoseconds
            problem = self.history.add_joint_state(stamp_ns, msg.name, msg.position)
            if problem:
                self._reject_input("bad_joint_states", f"ignored joint_states: {problem}")

    def _on_instruction(self, msg: String) -> None:
        """Executor thread: keep the instruction for the worker (``_take_instruction``);
        a flood costs a length check and a counter per message here."""
        reason = self.instructions.offer(msg.data)
        if reason:
            if self.instruction_log.record(reason, time.monotonic()):
                self.get_logger().warning(
                    f"instruction refused ({len(msg.data)} characters, more than "
                    f"instruction_max_chars {self.config.instruction_max_chars}): "
                    f"'{excerpt(msg.data)}'; the current one stays "
                    f"[{self.instructions.counts['refused_too_long']} so far]")
            return
        with self._work:
            self._work.notify()

    def _take_instruction(self) -> bool:
        """Worker thread: start the pending instruction's task if the rate allows; True when
        one was taken. Every instruction taken (the same words again too) starts a new
        task; those that came faster than ``instruction_min_interval_s`` were coalesced."""
        text = self.instructions.take(time.monotonic())
        if text is None:
            return False
        self.history.restart(self.get_clock().now().nanoseconds)
        if self.frame_ticks is not None:
            with self._work:
                self.frame_ticks.restart()  # the new task's first frame starts a chunk
        self.publishing.publish(self.instruction_pub, String(data=text))
        coalesced = self.instructions.counts["coalesced"]
        if coalesced and self.instruction_log.record("coalesced", time.monotonic()):
            self.get_logger().info(
                f"instructions arrive more often than every instruction_min_interval_s "
                f"({self.config.instruction_min_interval_s:g} s): only the newest is taken "
                f"[{coalesced} coalesced so far]")
        if text == self._instruction:
            return True
        self._instruction = text
        if not text:
            self.get_logger().warning("empty instruction: refusing to act until a new one")
            return True
        self.get_logger().info(f"instruction: '{excerpt(text)}' (takes effect at the next "
                               f"chunk)")
        self._embed(text)  # a cache miss runs the sentence encoder here, before the chunk
        return True

    # -- inference ----------------------------------------------------------------------------

    def _refuse(self, reason: str, detail: str, warn: bool = True) -> None:
        """Not acting: the refusal is kept for diagnostics and counted; a WARN (per reason
        at most every 2 s) unless ``warn`` is False, which logs at debug level and leaves
        the reason's WARN window untouched."""
        self._refusal = Refusal(reason, detail)
        if not warn:
            self.refusals.count(reason)
            self.get_logger().debug(f"not acting yet ({reason}): {detail}")
        elif self.refusals.record(reason, time.monotonic()):
            self.get_logger().warning(f"not acting ({reason}): {detail} "
                                      f"[{self.refusals.counts[reason]} so far]")

    def _on_rate_timer(self) -> None:
        if self.frame_ticks is not None:
            # Frames start the chunks; this timer only ticks when they stopped, so that a
            # missing or stale camera is still refused and reported.
            last_ns = self._last_tick_mark_ns
            if last_ns is not None and (self.get_clock().now().nanoseconds - last_ns
                                        < 1.5 * self.frame_ticks.period_ns):
                return
            self.watchdog_ticks += 1
        self._mark_tick_due()

    def _acting(self) -> bool:
        """Active and not stopped by ~/stop: the state in which chunks are computed."""
        return self._state == "active" and not self._stopped

    def _mark_tick_due(self) -> None:
        if self.runner is None or not self._acting():
            return
        with self._work:
            if self._tick_due:
                self.overrun_ticks += 1  # the worker is still on the previous chunk
            self._tick_due = True
            self._last_tick_mark_ns = self.get_clock().now().nanoseconds
            self._work.notify()

    def _inference_loop(self) -> None:
        while True:
            with self._work:
                if not (self._tick_due or self._image_due is not None or self._closing
                        or self.instructions.ready(time.monotonic())):
                    self._work.wait(JOINT_STATES_TAKE_PERIOD_S)
                if self._closing:
                    return
                tick, self._tick_due = self._tick_due, False
                image, self._image_due = self._image_due, None
            try:
                taken = self._take_instruction()
                if not (tick or taken or image is not None):
                    self._take_joint_states()
                    continue
                if image is not None:
                    self._encode_image_ahead(image)
                if tick:
                    self._tick()
            except Exception as exc:  # noqa: BLE001 - the worker must survive anything
                if not self.context.ok():
                    return  # SIGTERM shut ROS down while a chunk was being published
                self._refuse("inference_error", f"{type(exc).__name__}: {exc}")

    def _embed(self, text: str) -> None:
        runner = self.runner
        if runner is not None:
            try:
                runner.language.embed(text)  # cached now: the next chunk does not wait
            except Exception as exc:  # noqa: BLE001 - the chunk that needs it reports again
                self.get_logger().error(f"cannot embed instruction '{excerpt(text)}': {exc}")

    def _encode_image_ahead(self, image: np.ndarray) -> None:
        runner = self.runner
        if runner is None:
            return
        start = time.perf_counter()
        try:
            encoded = runner.encode_image_ahead(image)
        except Exception as exc:  # noqa: BLE001 - the chunk encodes it again and reports
            self.get_logger().debug(f"image not encoded ahead: {type(exc).__name__}: {exc}")
            return
        if encoded:
            self.images_encoded_ahead += 1
            self.stage_ms["image_encoder_ahead"].add((time.perf_counter() - start) * 1e3)

    def _tick(self) -> None:
        runner = self.runner  # held: a cleanup may clear self.runner meanwhile
        if runner is None or not self._acting():
            return
        wall = time.perf_counter()
        instruction = self._instruction
        if not instruction:
            # Waiting for a person is the normal state after start-up: said once, counted.
            self._refusal = Refusal("no_instruction", self.no_instruction)
            self.refusals.record("no_instruction", time.monotonic())
            if self.refusals.counts["no_instruction"] == 1:
                self.get_logger().info(f"not acting yet: {self.no_instruction}")
            return
        c = runner.config
        self._take_joint_states()
        now_ns = self.get_clock().now().nanoseconds
        generation = self.history.generation
        selection = self.history.select(now_ns, c.n_obs_steps, c.action_dt_s,
                                        self.config.max_obs_age_s)
        if isinstance(selection, Refusal):
            # After a new task cleared the history its first frame is on its way: counted,
            # not warned about unless it stays away longer than max_obs_age_s.
            awaited = selection.reason == NO_OBSERVATION and \
                self.history.awaiting_first_frame(now_ns, self.config.max_obs_age_s)
            self._refuse(selection.reason, selection.detail, warn=not awaited)
            return
        noise = None
        if self.config.seed >= 0:  # a reproducible sequence, restarted with every task
            if self._noise_generation != generation:
                self._noise = runner.noise_stream(self.config.seed)
                self._noise_generation = generation
            noise = self._noise
        t_predict = time.perf_counter()
        try:
            chunk = runner.predict(selection.observations, instruction, noise=noise)
        except ValueError as exc:  # shapes that do not fit the checkpoint
            self._refuse("bad_observation", str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - report, keep the node alive
            self._refuse("inference_error", f"{type(exc).__name__}: {exc}")
            return
        predict_ms = (time.perf_counter() - t_predict) * 1e3
        if not np.isfinite(chunk).all():
            self._refuse("non_finite_action", "the policy produced NaN or inf actions")
            return
        if not self._acting():
            return  # deactivated or stopped while this chunk was computed
        self._take_instruction()  # one that came meanwhile: this chunk is of the old task
        if self.history.generation != generation:
            self.discarded_after_restart += 1  # a new task began while this was computed
            return
        recovery = self.grasp_recovery
        if self._retry_generation != generation:
            recovery.restart()
            self._retry_generation = generation
        chunk = recovery.apply(chunk, selection.observations[-1]["joint_positions"],
                               selection.stamp_ns * 1e-9)
        for event in recovery.events:  # motions the policy did not command: say so
            line = (f"grasp recovery ({event.kind}, observation at {event.stamp_s:.2f} s): "
                    f"{event.message}")
            # One call site per severity: rclpy refuses another severity at the same site.
            if event.kind == "lift_unsolved":
                self.get_logger().warning(line)
            else:
                self.get_logger().info(line)
        stamp = ns_to_stamp(selection.stamp_ns)
        msg = JointTrajectory(joint_names=self.joint_names)
        msg.header.stamp = stamp
        msg.points = [JointTrajectoryPoint(positions=row.tolist(), time_from_start=t)
                      for row, t in zip(chunk, self._times_from_start, strict=True)]
        self.publishing.publish(self.chunk_pub, msg)
        if self._fk is not None and self.marker_pub.get_subscription_count() > 0:
            self.publishing.publish(self.marker_pub, self._markers(chunk, stamp))

        self._refusal = None
        self._chunk_instruction = instruction
        self.chunk_rate.tick(self._clock_s())
        self.chunk_rate_wall.tick(time.monotonic())
        if self._first_chunk_ms is None:
            self._first_chunk_ms = predict_ms
        for name, ms in runner.last_timings_ms.items():
            if name in self.stage_ms:
                self.stage_ms[name].add(ms)
        self.stage_ms["predict"].add(predict_ms)
        self.observation_age_at_start_ms_max = max(self.observation_age_at_start_ms_max,
                                                   (now_ns - selection.stamp_ns) * 1e-6)
        self.observation_age_ms.add((self.get_clock().now().nanoseconds - selection.stamp_ns)
                                    * 1e-6)
        for offset in selection.offsets_s[:-1]:
            self.history_offset_ms.add(abs(offset) * 1e3)
        self.history_short += selection.short
        self.stage_ms["tick"].add((time.perf_counter() - wall) * 1e3)

    def _markers(self, chunk: np.ndarray, stamp) -> MarkerArray:
        path = [Point(x=float(p[0]), y=float(p[1]), z=float(p[2]))
                for p in self._fk.tool_positions(chunk)]
        header_frame = self.config.base_frame
        lifetime = duration_msg(max(0.5, 3.0 / self.config.rate_hz))
        line = Marker(ns="policy_ee_path", id=0, type=Marker.LINE_STRIP, action=Marker.ADD,
                      points=path, lifetime=lifetime)
        line.header.frame_id, line.header.stamp = header_frame, stamp
        line.pose.orientation.w = 1.0
        line.scale.x = 0.005
        line.color = ColorRGBA(r=0.1, g=0.8, b=0.2, a=1.0)
        # Target: the last point; red when the gripper is closing over the chunk.
        closing = chunk[-1, 6] < chunk[0, 6] - 1e-3
        target = Marker(ns="policy_ee_target", id=1, type=Marker.SPHERE, action=Marker.ADD,
                        lifetime=lifetime)
        target.header.frame_id, target.header.stamp = header_frame, stamp
        target.pose.position = path[-1]
        target.pose.orientation.w = 1.0
        target.scale.x = target.scale.y = target.scale.z = 0.02
        target.color = (ColorRGBA(r=0.9, g=0.1, b=0.1, a=0.9) if closing
                        else ColorRGBA(r=0.1, g=0.4, b=0.9, a=0.9))
        return MarkerArray(markers=[line, target])

    # -- diagnostics --------------------------------------------------------------------------

    def _clock_s(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _check_observation_qos(self) -> None:
        """Warn once per topic when a publisher's QoS can never match the observation
        subscriptions (they have no QoS event handler, ``ros.polled``)."""
        for topic, publisher in self.observation_qos_check.new_findings():
            self.get_logger().warning(
                f"{topic}: publisher '{publisher}' offers QoS (best effort or volatile) "
                "that this reliable subscription cannot take: no observations from it")

    def _publish_diagnostics(self) -> None:
        self.observation_thread.raise_failure("policy_node's observation thread")
        self._check_observation_qos()
        cfg = self.config
        rate = self.chunk_rate.rate_hz(self._clock_s())
        acting = self._acting()
        refusal = self._refusal if acting else None
        status = DiagnosticStatus(name=f"{self.get_name()}: policy", hardware_id="policy")
        if self._error and self._state == "unconfigured":
            status.level, status.message = DiagnosticStatus.ERROR, self._error
        elif self._state != "active":
            status.level, status.message = DiagnosticStatus.WARN, f"{self._state}: not acting"
        elif self._stopped:
            status.level, status.message = DiagnosticStatus.WARN, "stopped by ~/stop"
        elif refusal is not None:
            level = (DiagnosticStatus.ERROR if refusal.reason in ("inference_error",
                                                                   "non_finite_action")
                     else DiagnosticStatus.WARN)
            status.level, status.message = level, f"not acting ({refusal.reason}): {refusal.detail}"
        elif rate < 0.8 * cfg.rate_hz:
            status.level = DiagnosticStatus.WARN
            status.message = f"chunks at {rate:.1f} Hz, below {cfg.rate_hz:g} Hz"
        else:
            status.level, status.message = DiagnosticStatus.OK, "acting"
        self.clock_thread.report(status)
        runner = self.runner
        h = self.history
        pending_images, pending_points = h.pending
        values = {
            "state": self._state,
            "acting": str(acting and refusal is None).lower(),
            "stopped": str(self._stopped).lower(),
            "refusal": refusal.reason if refusal else "",
            "refusal_detail": refusal.detail if refusal else "",
            "instruction": self._instruction,
            "chunk_instruction": self._chunk_instruction,
            **{f"instructions_{key}": str(n) for key, n in self.instructions.counts.items()},
            "checkpoint": cfg.checkpoint,
            "device": str(runner.device) if runner else cfg.device,
            "precision": cfg.precision,
            "num_inference_steps": str(runner.num_inference_steps) if runner else "",
            "num_samples": str(runner.num_samples) if runner else "",
            "rate_hz_target": f"{cfg.rate_hz:g}",
            "chunk_rate_hz": f"{rate:.2f}",
            "chunk_rate_wall_hz": f"{self.chunk_rate_wall.rate_hz(time.monotonic()):.2f}",
            "chunks_total": str(self.chunk_rate.total),
            "overrun_ticks": str(self.overrun_ticks),
            "tick_source": self.config.tick_source,
            "scheduling": self.scheduling,
            "watchdog_ticks": str(self.watchdog_ticks),
            "history_restarts": str(h.generation),
            "discarded_after_restart": str(self.discarded_after_restart),
            "images_encoded_ahead_total": str(self.images_encoded_ahead),
            "grasp_retries_total": str(self.grasp_recovery.retries_total
                                       if self.grasp_recovery else 0),
            "grasp_lifts_total": str(self.grasp_recovery.lifts_total
                                     if self.grasp_recovery else 0),
            "first_chunk_ms": (f"{self._first_chunk_ms:.2f}" if self._first_chunk_ms is not None
                               else ""),
            "warmup_ms": ", ".join(f"{w:.1f}" for w in self._warmup_ms),
            **{f"{name}_ms_{q}": f"{stats.percentile(p):.3f}"
               for name, stats in self.stage_ms.items() for q, p in (("p50", 50), ("p99", 99))},
            "observation_age_ms_p50": f"{self.observation_age_ms.percentile(50):.3f}",
            "observation_age_ms_p99": f"{self.observation_age_ms.percentile(99):.3f}",
            "observation_age_at_start_ms_max": f"{self.observation_age_at_start_ms_max:.3f}",
            "history_offset_ms_p99": f"{self.history_offset_ms.percentile(99):.3f}",
            "history_short_total": str(self.history_short),
            "frames": str(len(h)),
            "images_total": str(h.images_total),
            "points_total": str(h.points_total),
            "paired_total": str(h.paired_total),
            "pending_images": str(pending_images),
            "pending_points": str(pending_points),
            "non_finite_frames_total": str(h.non_finite_frames),
            "joint_states_total": str(h.joint_states_total),
            **{f"dropped_{reason}": str(n) for reason, n in sorted(h.drops.items())},
            **{f"rejected_{reason}": str(n)
               for reason, n in sorted(self.input_rejects.counts.items())},
            **{f"refused_{reason}": str(n) for reason, n in sorted(self.refusals.counts.items())},
            "publish_refused": str(self.publishing.refused_total),
        }
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self.publishing.publish(self.diag_pub, msg)


    def destroy_node(self):
        observation_thread = getattr(self, "observation_thread", None)
        if observation_thread is not None:
            observation_thread.stop()
            self.observation_topics.destroy()
        worker = getattr(self, "_worker", None)  # absent when the parameters were invalid
        if worker is not None:
            with self._work:
                self._closing = True
                self._work.notify()
            worker.join(timeout=10.0)
        clock_thread = getattr(self, "clock_thread", None)
        if clock_thread is not None:
            clock_thread.stop()
        return super().destroy_node()


def main(args=None) -> None:
    run_node(PolicyNode, "policy_node", args)


if __name__ == "__main__":
    main()
