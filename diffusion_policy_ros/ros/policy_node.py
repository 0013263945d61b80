"""policy_node: synchronized observations + instruction -> diffusion-policy action chunks.

A thin lifecycle adapter (docs/reference/nodes.md): ``acting.agent.PolicyAgent`` acts (observation
history, tasks, noise, chunk rules) with the ``policy.runner.PolicyRunner`` that configure
loads (``ros.policy_loading``); the node subscribes, decodes, ticks, publishes and
reports. Observation frames are taken on a thread of their own
(``ros.polled.WaitedSubscriptions``), ``joint_states`` is polled by the worker, every
instruction taken through the bounded ``InstructionInbox`` starts a task at the node's
clock and is republished on ``policy/instruction``. Ticks (``ros.inference_worker``:
frames or a timer) have the worker thread act and publish, so subscriptions, services and
diagnostics keep running while the policy computes. ``~/stop`` pauses acting, ``~/start``
resumes it, configuring and activating where needed, as ``autostart`` does.
"""

from __future__ import annotations

import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import Image, JointState, PointCloud2
from std_msgs.msg import String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import MarkerArray

from diffusion_policy_ros.acting.agent import DISCARDED, Chunk, PolicyAgent
from diffusion_policy_ros.acting.observation_history import NO_OBSERVATION, Refusal
from diffusion_policy_ros.monitoring import excerpt
from diffusion_policy_ros.perception.frame_schedule import FrameRateSchedule
from diffusion_policy_ros.perception.image_decoding import FrameRejected, decode_color
from diffusion_policy_ros.policy.language import InstructionInbox
from diffusion_policy_ros.policy.node_config import PolicyNodeConfig
from diffusion_policy_ros.policy.runner import PolicyRunner
from diffusion_policy_ros.ros.chunk_messages import chunk_markers, chunk_msg, duration_msg
from diffusion_policy_ros.ros.chunk_statistics import ChunkStatistics
from diffusion_policy_ros.ros.conversions import (
    ns_to_stamp,
    raw_image,
    stamp_to_ns,
    xyzrgb_from_cloud_msg,
)
from diffusion_policy_ros.ros.inference_worker import InferenceWorker
from diffusion_policy_ros.ros.latched import subscribe_any_durability
from diffusion_policy_ros.ros.lean_events import LeanEventsMixin
from diffusion_policy_ros.ros.node_main import run_node
from diffusion_policy_ros.ros.operator_log import OperatorLog, node_status
from diffusion_policy_ros.ros.params import declare_config
from diffusion_policy_ros.ros.policy_loading import ConfigureError, load_policy
from diffusion_policy_ros.ros.polled import (
    IncompatiblePublisherCheck,
    PolledSubscription,
    WaitedSubscriptions,
)
from diffusion_policy_ros.ros.publish_guard import PublishGuard
from diffusion_policy_ros.ros.realtime import (
    MessageDrivenThread,
    apply_niceness,
    request_fifo_priority,
)
from diffusion_policy_ros.ros.sim_clock import ClockThread

_SUCCESS, _FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
#: joint_states kept between two takes: 0.4 s at 500 Hz.
JOINT_STATE_QUEUE_DEPTH = 200
#: How often the idle inference worker takes the queued joint_states (s): about ten at a
#: time at 500 Hz, so the take before a chunk is short.
JOINT_STATES_TAKE_PERIOD_S = 0.02


class PolicyNode(LeanEventsMixin, LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("policy_node", **kwargs)
        self.config: PolicyNodeConfig = declare_config(self, PolicyNodeConfig)
        cfg = self.config
        self.scheduling = apply_niceness(cfg.niceness, self.get_logger(),
                                         "chunks share the CPU evenly")
        self.clock_thread = ClockThread(self)
        self.joint_names = cfg.action_joint_names
        # seed >= 0: a reproducible noise sequence, restarted with every task.
        self.agent = PolicyAgent(self.joint_names, max_obs_age_s=cfg.max_obs_age_s,
                                 noise="stream" if cfg.seed >= 0 else "fresh", seed=cfg.seed,
                                 read_instructions=cfg.read_instructions)
        self.instructions = InstructionInbox(cfg.instruction_max_chars,
                                             cfg.instruction_min_interval_s)
        self.publishing = PublishGuard(self.get_logger(), self.context)
        self.stats = ChunkStatistics()
        # Swapped atomically between threads (plain attribute assignment).
        self._fk = None
        self._state = "unconfigured"
        self._stopped = False
        self._chunk_instruction = ""
        self._error = ""
        self._times_from_start = []
        self.worker = InferenceWorker(
            FrameRateSchedule(cfg.rate_hz) if cfg.tick_source == "observation" else None,
            may_act=lambda: self.runner is not None and self._acting(),
            instruction_ready=lambda: self.instructions.ready(time.monotonic()),
            take_instruction=self._take_instruction, idle=self._take_joint_states,
            encode=self._encode_image_ahead, tick=self._tick, failed=self._worker_failed,
            idle_period_s=JOINT_STATES_TAKE_PERIOD_S, name="policy_inference")

        steady = Clock(clock_type=ClockType.STEADY_TIME)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        observation = [PolledSubscription(self, msg_type, topic, QoSProfile(depth=5))
                       for msg_type, topic in ((Image, "observation/image"),
                                               (PointCloud2, "observation/points"))]
        self.observation_topics = WaitedSubscriptions(
            self, dict(zip(observation, (self._on_image, self._on_points), strict=True)))
        self.observation_qos_check = IncompatiblePublisherCheck(self, observation)
        self.joint_states = PolledSubscription(self, JointState, "joint_states",
                                               QoSProfile(depth=JOINT_STATE_QUEUE_DEPTH))
        _, live = subscribe_any_durability(self, String, "instruction", self._on_instruction)
        self.log = OperatorLog(self.get_logger(), live.topic_name)
        self.instruction_pub = self.create_publisher(String, "policy/instruction", latched)
        self.status_pub = self.create_publisher(String, "policy/status", latched)
        # Lifecycle publishers: silent unless the node is active.
        self.chunk_pub = self.create_lifecycle_publisher(JointTrajectory, "policy/action_chunk",
                                                         QoSProfile(depth=2))
        self.marker_pub = self.create_lifecycle_publisher(MarkerArray, "policy/markers",
                                                          QoSProfile(depth=1))
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", QoSProfile(depth=10))
        self.create_service(Trigger, "~/start", self._on_start)
        self.create_service(Trigger, "~/stop", self._on_stop)
        self.create_timer(1.0 / cfg.rate_hz, lambda: self.worker.timer(self._now_ns()),
                          callback_group=MutuallyExclusiveCallbackGroup())
        self.create_timer(cfg.diagnostics_period_s, self._publish_diagnostics, clock=steady)
        self.worker.start()
        self.observation_thread = MessageDrivenThread(
            self.observation_topics, self._on_observation_message, 0, "policy_observations")
        self.observation_thread.start()
        problem = request_fifo_priority(cfg.inference_priority, self.worker.thread.native_id)
        if not problem:
            self.scheduling += f", inference thread SCHED_FIFO {cfg.inference_priority}"
        elif cfg.inference_priority:
            self.get_logger().warning(f"inference_priority: {problem}; the inference thread "
                                      f"runs at the node's {self.scheduling}")
        if cfg.autostart:
            self._autostart_timer = self.create_timer(0.0, self._autostart, clock=steady)
        self.get_logger().info(
            f"policy_node up ({'autostart' if cfg.autostart else 'waiting for configure'}): "
            f"checkpoint '{cfg.checkpoint}', device {cfg.device}, {cfg.precision}, {cfg.rate_hz:g}"
            f" Hz, max observation age {cfg.max_obs_age_s:g} s, {self.scheduling}")

    @property
    def runner(self) -> PolicyRunner | None:  # the loaded policy, None unless configured
        return self.agent.policy

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

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        cfg = self.config
        try:
            loaded = load_policy(cfg, self.agent.instruction)
        except ConfigureError as exc:
            self._error = str(exc)
            self.get_logger().error(f"configure failed: {exc}")
            return _FAILURE
        runner, c = loaded.runner, loaded.runner.config
        self._times_from_start = [duration_msg(k * c.action_dt_s) for k in range(c.horizon)]
        if loaded.kinematics is None and cfg.publish_markers:
            self.get_logger().warning(f"policy/markers disabled: {loaded.kinematics_problem}")
        self._fk = loaded.kinematics if cfg.publish_markers else None
        self.stats.loaded(loaded.warmup_ms)
        self._error = ""
        self.agent.load(runner, loaded.rules)
        self._state = "inactive"
        rules = ", ".join(type(rule).__name__ for rule in loaded.rules.rules)
        self.get_logger().info(
            f"configured: {cfg.checkpoint} on {runner.device} ({cfg.precision}, "
            f"{runner.backend.name}), To {c.n_obs_steps} x {c.action_dt_s:g} s, T {c.horizon}, "
            f"{runner.num_inference_steps} {c.sampler} steps x K {runner.num_samples}, chunk "
            f"rules: {rules or 'none'}; loaded in {loaded.load_ms:.0f} ms, warm-up chunks "
            f"{', '.join(f'{w:.0f}' for w in loaded.warmup_ms)} ms")
        return _SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stopped = False
        self.stats.first_chunk_ms = None
        self._state = "active"
        waiting = "" if self.agent.instruction else " once an instruction comes"
        self.get_logger().info(f"active: acting at {self.config.rate_hz:g} Hz{waiting}")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._state = "inactive"
        self.get_logger().info("inactive: no more action chunks")
        return super().on_deactivate(state)

    def _release(self, state: str) -> TransitionCallbackReturn:
        self.agent.unload()
        self._fk, self._state = None, state
        return _SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._release("unconfigured")

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._release("finalized")

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.get_logger().error(f"lifecycle error from state '{state.label}': model released")
        return self._release("unconfigured")

    def _on_start(self, request: Trigger.Request, response: Trigger.Response):
        problem = ""
        if self._state == "unconfigured" and self.trigger_configure() != _SUCCESS:
            problem = f"configure failed: {self._error}"
        elif self._state == "inactive" and self.trigger_activate() != _SUCCESS:
            problem = "activate failed"
        elif self._state != "active":
            problem = f"cannot start from lifecycle state '{self._state}'"
        else:
            self._stopped = False
            self.get_logger().info("~/start: acting")
        response.success, response.message = not problem, problem or "acting"
        return response

    def _on_stop(self, request: Trigger.Request, response: Trigger.Response):
        self._stopped = True
        response.success, response.message = True, f"stopped (lifecycle state '{self._state}')"
        self.get_logger().info("~/stop: no more action chunks until ~/start")
        return response

    # -- inputs -------------------------------------------------------------------------------

    def _on_observation_message(self, taken) -> None:
        handler, msg = taken
        try:
            handler(msg)
        except Exception as exc:  # noqa: BLE001 - a bad message must never stop the thread
            self.log.rejected_input("internal_error", f"ignored {type(msg).__name__}: "
                                                 f"{type(exc).__name__}: {exc}")

    def _on_image(self, msg: Image) -> None:
        try:
            rgb = decode_color(raw_image(msg))
        except FrameRejected as exc:
            self.log.rejected_input(f"image_{exc.reason}", f"ignored observation/image: {exc}")
            return
        stamp_ns = stamp_to_ns(msg.header.stamp)
        if self.agent.add_image(stamp_ns, rgb):
            self.worker.frame(stamp_ns, self._now_ns())
        elif self.agent.fits_image(rgb):  # its cloud is on its way
            self.worker.image(stamp_ns, rgb)

    def _on_points(self, msg: PointCloud2) -> None:
        try:
            points, colors = xyzrgb_from_cloud_msg(msg)
        except ValueError as exc:
            self.log.rejected_input("bad_points", f"ignored observation/points: {exc}")
            return
        stamp_ns = stamp_to_ns(msg.header.stamp)
        if self.agent.add_points(stamp_ns, points, colors):
            self.worker.frame(stamp_ns, self._now_ns())

    def _take_joint_states(self) -> None:
        """Move the queued joint_states into the history (on any thread; it locks)."""
        for msg in self.joint_states.take_all():
            stamp_ns = stamp_to_ns(msg.header.stamp) or self._now_ns()
            problem = self.agent.add_joint_state(stamp_ns, msg.name, msg.position)
            if problem:
                self.log.rejected_input("bad_joint_states", f"ignored joint_states: {problem}")

    def _on_instruction(self, msg: String) -> None:
        """Executor thread: keep the instruction for the worker (``_take_instruction``);
        a flood costs a length check and a counter per message here."""
        if self.instructions.offer(msg.data):
            self.log.instruction_refused(msg.data, self.config.instruction_max_chars,
                                         self.instructions.counts["refused_too_long"])
        else:
            self.worker.wake()

    def _take_instruction(self) -> bool:
        """Worker thread: start the pending instruction's task if the rate allows; True when
        one was taken. Every instruction taken (the same words again too) starts a task."""
        text = self.instructions.take(time.monotonic())
        if text is None:
            return False
        changed = text != self.agent.words
        self.agent.restart(text, self._now_ns())
        self.worker.restart()
        self.publishing.publish(self.instruction_pub, String(data=text))
        reading = self.agent.reading
        self.publishing.publish(self.status_pub, String(data=reading.status()))
        self.log.instructions_coalesced(self.config.instruction_min_interval_s,
                                        self.instructions.counts["coalesced"])
        if changed:
            self.log.instruction_taken(text, reading)
        runner, sentence = self.runner, self.agent.instruction
        if changed and sentence and runner is not None:
            try:  # a cache miss runs the sentence encoder now, not in the next chunk
                runner.language.embed(sentence)
            except Exception as exc:  # noqa: BLE001 - the chunk that needs it reports again
                self.get_logger().error(f"cannot embed instruction '{excerpt(sentence)}': {exc}")
        return True

    # -- inference ----------------------------------------------------------------------------

    def _acting(self) -> bool:
        """Active and not stopped by ~/stop: the state in which chunks are computed."""
        return self._state == "active" and not self._stopped

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _worker_failed(self, exc: Exception) -> bool:
        if not self.context.ok():
            return True  # SIGTERM shut ROS down while a chunk was being published
        self.log.refused(Refusal("inference_error", f"{type(exc).__name__}: {exc}"))
        return False

    def _encode_image_ahead(self, image: np.ndarray) -> None:
        runner, start = self.runner, time.perf_counter()
        try:
            if runner is not None and runner.encode_image_ahead(image):
                self.stats.image_encoded_ahead((time.perf_counter() - start) * 1e3)
        except Exception as exc:  # noqa: BLE001 - the chunk encodes it again and reports
            self.get_logger().debug(f"image not encoded ahead: {type(exc).__name__}: {exc}")

    def _tick(self) -> None:
        runner = self.runner  # held: a cleanup may release it meanwhile
        if runner is None or not self._acting():
            return
        wall = time.perf_counter()
        self._take_joint_states()
        now_ns = self._now_ns()
        # An instruction that came while the chunk was computed starts its task before the
        # chunk is published: the chunk, of the old task, is then discarded.
        outcome = self.agent.act(now_ns, meanwhile=self._take_instruction)
        if isinstance(outcome, Refusal):
            if outcome.reason != DISCARDED:  # a discarded chunk is counted by the agent
                # A new task's first frame is on its way: counted, not warned about unless
                # it stays away longer than max_obs_age_s.
                awaited = (outcome.reason == NO_OBSERVATION
                           and self.agent.awaiting_first_frame(now_ns))
                self.log.refused(outcome, warn=not awaited)
        elif self._acting():  # not deactivated or stopped while the chunk was computed
            self._publish(outcome, runner, now_ns)
            self.stats.stage_ms["tick"].add((time.perf_counter() - wall) * 1e3)

    def _publish(self, chunk: Chunk, runner: PolicyRunner, now_ns: int) -> None:
        self.log.rule_events(chunk.events)
        actions, stamp = chunk.actions, ns_to_stamp(chunk.stamp_ns)
        self.publishing.publish(self.chunk_pub, chunk_msg(actions, self.joint_names, stamp,
                                                          self._times_from_start))
        if self._fk is not None and self.marker_pub.get_subscription_count() > 0:
            closing = actions[-1, -1] < actions[0, -1] - 1e-3
            self.publishing.publish(self.marker_pub, chunk_markers(
                self._fk.tool_positions(actions), closing, self.config.base_frame, stamp,
                max(0.5, 3.0 / self.config.rate_hz)))
        self.log.acted()
        self._chunk_instruction = self.agent.instruction
        published_ns = self._now_ns()
        self.stats.chunk(chunk.predict_ms, runner.last_timings_ms, chunk.stamp_ns, now_ns,
                         published_ns, published_ns * 1e-9, time.monotonic())

    # -- diagnostics --------------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        self.observation_thread.raise_failure("policy_node's observation thread")
        # Publishers whose QoS these subscriptions can never take (no event handler there).
        for topic, publisher in self.observation_qos_check.new_findings():
            self.log.incompatible_publisher(topic, publisher)
        cfg, runner = self.config, self.runner
        rate = self.stats.rate.rate_hz(self._now_ns() * 1e-9)
        acting = self._acting()
        refusal = self.log.refusal if acting else None
        level, message = node_status(self._state, self._error, self._stopped, refusal, rate,
                                     cfg.rate_hz)
        status = DiagnosticStatus(name=f"{self.get_name()}: policy", hardware_id="policy",
                                  level=level, message=message)
        self.clock_thread.report(status)
        values = {
            "state": self._state,
            "acting": str(acting and refusal is None).lower(),
            "stopped": str(self._stopped).lower(),
            "refusal": refusal.reason if refusal else "",
            "refusal_detail": refusal.detail if refusal else "",
            "instruction": self.agent.words,
            "instruction_read": self.agent.instruction,
            "chunk_instruction": self._chunk_instruction,
            **{f"instructions_{key}": str(n) for key, n in self.instructions.counts.items()},
            "checkpoint": cfg.checkpoint,
            "device": str(runner.device) if runner else cfg.device,
            "precision": cfg.precision,
            "num_inference_steps": str(runner.num_inference_steps) if runner else "",
            "num_samples": str(runner.num_samples) if runner else "",
            "rate_hz_target": f"{cfg.rate_hz:g}",
            "tick_source": cfg.tick_source,
            "scheduling": self.scheduling,
            "overrun_ticks": str(self.worker.overrun_ticks),
            "watchdog_ticks": str(self.worker.watchdog_ticks),
            **self.stats.values(rate, time.monotonic()),
            **{key: f"{n:.3f}" if isinstance(n, float) else str(n)
               for key, n in self.agent.statistics().items()},
            **self.log.values(),
            "publish_refused": str(self.publishing.refused_total),
        }
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self.publishing.publish(self.diag_pub, msg)

    def destroy_node(self):
        if hasattr(self, "observation_thread"):  # absent when the parameters were invalid
            self.observation_thread.stop()
            self.observation_topics.destroy()
        for thread in (getattr(self, "worker", None), getattr(self, "clock_thread", None)):
            if thread is not None:
                thread.stop()
        return super().destroy_node()


def main(args=None) -> None:
    run_node(PolicyNode, "policy_node", args)


if __name__ == "__main__":
    main()
