"""``GraspCommander``: drive a running grasp graph from Python, without rclpy in user code.

In the spirit of nav2_simple_commander's ``BasicNavigator``: whoever started the graph
(``dpr bringup``, ``ros2 launch diffusion_policy_ros grasp.launch.py``, a real robot's
bring-up), a script or a test drives it with a few calls::

    from diffusion_policy_ros.ros.bringup.commander import GraspCommander

    with GraspCommander() as commander:
        commander.wait_until_ready()             # every node reports, chunks flow
        record = commander.run_episode("pick up the red cube")
        print(record["status"], record["chunk_latency_ms"]["p50"])

Episodes (reset, scoring) need ``sim_node``: ``reset_episode`` calls ``sim_node/reset``
(std_srvs/Trigger), ``sim/episode`` (latched JSON reports) says how it ended
(``success`` / ``wrong_object`` / ``timeout``). Instructions, chunk latencies and
``/diagnostics`` work with any graph. Every wait is bounded and checks ``stop_reason``
(e.g. a signal or an exited node process) between spins, raising ``CommanderStopped``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.client import Client
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.time import Time
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, PointCloud2
from std_msgs.msg import String
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory

from diffusion_policy_ros.monitoring import LatencyStages, SimTimeToWall
from diffusion_policy_ros.ros.bringup.statistics import OUTCOMES, finite_or_none, percentiles
from diffusion_policy_ros.ros.conversions import stamp_to_ns
from diffusion_policy_ros.ros.dds_profiles import namespace_ros_args, use_package_dds_profiles
from diffusion_policy_ros.ros.lean_events import LeanNode
from diffusion_policy_ros.ros.sim_clock import drop_time_source_subscription, ros_clock

#: The package's nodes in a grasp graph (each reports on /diagnostics).
GRAPH_NODES = ("sim_node", "rgbd_sync_node", "policy_node", "pd_tracker_node")
#: How long an episode's end waits (wall s) for its chunks still in flight: the policy
#: publishes each chunk a few tens of milliseconds after its observation.
IN_FLIGHT_WAIT_S = 0.5
_LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)


class CommanderStopped(Exception):
    """The drive must end: a stop was requested, a node exited, or the graph did not answer."""


def _count(entry: dict, message: str, most: int = 3) -> None:
    """One more status in ``entry``; its message kept if new and among the first ``most``."""
    entry["count"] += 1
    if message not in entry["messages"] and len(entry["messages"]) < most:
        entry["messages"].append(message)


def _object_names() -> list[str]:
    from diffusion_policy_ros.sim.scene import find_objects, load_model

    return [o.name for o in find_objects(load_model())]


class GraspCommander:
    """A node that instructs the graph, resets and scores episodes, and records what it saw.

    ``namespace``: the graph's namespace (its topics and ``sim_node/reset`` are
    resolved in it). ``use_sim_time``: follow ``/clock`` (switch delays are sim
    seconds then). ``stop_reason``: called between spins; a non-empty string ends
    any wait with ``CommanderStopped``. ``record_media``: record each episode's
    camera view and joint plot (``run_episode(media_dir=...)``). ``latency_stages``:
    also read ``camera/rgb/camera_info`` and ``observation/points`` for the chunks'
    latency hop by hop (``stages_ms``); those readers cost the graph CPU, and on two
    cores lengthen the latency they split. rclpy is
    initialised here unless it already is, and shut down by ``close`` if so.
    """

    def __init__(self, namespace: str = "", use_sim_time: bool = False,
                 stop_reason: Callable[[], str] = lambda: "", record_media: bool = False,
                 node_name: str = "grasp_commander", latency_stages: bool = False):
        self._owns_rclpy = not rclpy.ok()
        if self._owns_rclpy:
            use_package_dds_profiles(namespace_ros_args(namespace))
            rclpy.init()
        self.stop_reason = stop_reason
        namespace = namespace.strip("/")
        self.node = LeanNode(
            node_name, namespace=f"/{namespace}" if namespace else "",
            parameter_overrides=[Parameter("use_sim_time", value=use_sim_time)])
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        #: (monotonic s, observation stamp -> chunk received ms; NaN where not measurable).
        #: The reception time is the middleware's; on sim time the stamp's wall time is
        #: interpolated between /clock publications (``SimTimeToWall``).
        self.chunks: list[list[float]] = []
        #: Each chunk's header stamp (the observation's, ns), per index in ``chunks``.
        self.chunk_stamps_ns: list[int] = []
        self._newest_chunk_stamp_ns = -1
        self._sim_to_wall = SimTimeToWall() if use_sim_time else None
        #: With ``latency_stages``: the same latency hop by hop, per index in ``chunks``.
        self.latency_stages = LatencyStages() if latency_stages else None
        #: (index in ``chunks``, stamp ns, published ns, received ns) of chunks whose stamp is newer
        #: than the last /clock this node has taken: its executor takes one message per
        #: subscription per wake-up, so a busy commander can read a chunk before the
        #: /clock samples that bracket its stamp.
        self._unresolved: list[tuple[int, int, int, int]] = []
        # The chunks of the episodes run_episode measured: between episodes this process
        # writes the media and reads what queued meanwhile late.
        self.episode_chunk_latencies_ms: list[float] = []
        self.episode_latency_stages_ms: list[dict[str, float]] = []
        self.diagnostics: dict[str, dict[str, str]] = {}  # node -> latest key/values
        self.diag_counts: dict[str, int] = {}
        self.diag_messages: dict[str, str] = {}
        self.diag_errors: dict[str, bool] = {}
        #: ERROR statuses per node from the first /diagnostics message on: ``count``, how
        #: many came ``before_ready`` (``wait_until_ready``), the first ``messages``.
        self.errors: dict[str, dict] = {}
        #: WARN statuses per node before the graph was ready (``count``, the first
        #: ``messages``): the states a node passes through while the graph comes up
        #: (waiting for joint_states, no chunks yet, the sim below real time).
        self.startup_warnings: dict[str, dict] = {}
        self.ready = False
        self.episodes: dict[int, dict] = {}  # episode number -> latest sim/episode report
        self.resets_started_by_report = 0  # see reset_episode
        self.ended: list[dict] = []  # reports of episodes that ended, in order
        self.tracker_p99: list[tuple[float, float]] = []  # (monotonic s, period_error p99)
        self.node.create_subscription(JointTrajectory, "policy/action_chunk", self._on_chunk,
                                      QoSProfile(depth=10))
        if self.latency_stages is not None:
            # The hops' publication times: small messages, best effort (no acknowledgements
            # asked of the camera or the sync node; a lost one leaves a stage unmeasured).
            probe_qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
            self.node.create_subscription(CameraInfo, "camera/rgb/camera_info",
                                          self._on_camera_info, probe_qos)
            self.node.create_subscription(PointCloud2, "observation/points", self._on_points,
                                          probe_qos)
        if use_sim_time:
            # One /clock reader: this one also sets the node's clock (ros.sim_clock).
            drop_time_source_subscription(self.node)
            self.node.create_subscription(
                Clock, "/clock", self._on_clock,
                QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT))
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics,
                                      QoSProfile(depth=50))
        self.node.create_subscription(String, "sim/episode", self._on_episode, _LATCHED)
        self.instruction_pub = self.node.create_publisher(String, "instruction", _LATCHED)
        self.reset_client: Client = self.node.create_client(Trigger, "sim_node/reset")
        self.pause_client: Client = self.node.create_client(SetBool, "sim_node/pause")
        self.recorder = None
        if record_media:
            from diffusion_policy_ros.ros.episode_recorder import EpisodeMediaRecorder

            self.recorder = EpisodeMediaRecorder(self.node)
        self._object_names: list[str] | None = None

    def __enter__(self) -> GraspCommander:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        if self._owns_rclpy:
            rclpy.try_shutdown()

    # -- callbacks --------------------------------------------------------------------------

    def _on_clock(self, msg: Clock, info) -> None:
        ros_clock(self.node).set_ros_time_override(Time.from_msg(msg.clock))
        if info["source_timestamp"] > 0:  # 0: a middleware that does not stamp samples
            assert self._sim_to_wall is not None  # subscribed on sim time
            self._sim_to_wall.add(stamp_to_ns(msg.clock), info["source_timestamp"])
            if self._unresolved:
                self._resolve_latencies()

    def _on_camera_info(self, msg: CameraInfo, info) -> None:
        if info["source_timestamp"] > 0:
            assert self.latency_stages is not None  # subscribed for latency_stages
            self.latency_stages.frame_published(stamp_to_ns(msg.header.stamp),
                                                info["source_timestamp"])

    def _on_points(self, msg: PointCloud2, info) -> None:
        if info["source_timestamp"] > 0:
            assert self.latency_stages is not None  # subscribed for latency_stages
            self.latency_stages.points_published(stamp_to_ns(msg.header.stamp),
                                                 info["source_timestamp"])

    def _on_chunk(self, msg: JointTrajectory, info) -> None:
        stamp_ns = stamp_to_ns(msg.header.stamp)
        received_ns = info["received_timestamp"] or time.time_ns()
        published_ns = info.get("source_timestamp") or 0  # 0: not stamped
        self.chunks.append([time.monotonic(), float("nan")])
        self.chunk_stamps_ns.append(stamp_ns)
        self._newest_chunk_stamp_ns = max(self._newest_chunk_stamp_ns, stamp_ns)
        if self._sim_to_wall is None:
            self._resolved(len(self.chunks) - 1, stamp_ns, stamp_ns, published_ns, received_ns)
        else:
            self._unresolved.append((len(self.chunks) - 1, stamp_ns, published_ns, received_ns))
            self._resolve_latencies()

    def _resolved(self, index: int, stamp_ns: int, stamp_wall_ns: float, published_ns: int,
                  received_ns: int) -> None:
        self.chunks[index][1] = (received_ns - stamp_wall_ns) * 1e-6
        if self.latency_stages is not None and published_ns > 0:
            self.latency_stages.chunk(index, stamp_ns, stamp_wall_ns, published_ns, received_ns)

    def _resolve_latencies(self) -> None:
        """Latencies of the unresolved chunks whose stamp the /clock window now covers;
        a stamp older than the window stays NaN (not measurable)."""
        sim_to_wall = self._sim_to_wall
        assert sim_to_wall is not None  # only on sim time
        newest_ns = sim_to_wall.newest_sim_ns()
        waiting = []
        for item in self._unresolved:
            index, stamp_ns, published_ns, received_ns = item
            if newest_ns is None or stamp_ns > newest_ns:
                waiting.append(item)
                continue
            stamp_wall_ns = sim_to_wall.wall_ns_at(stamp_ns)
            if stamp_wall_ns is not None:
                self._resolved(index, stamp_ns, stamp_wall_ns, published_ns, received_ns)
        self._unresolved = waiting

    def stages_ms(self, indices) -> list[dict[str, float]]:
        """The hop-by-hop latencies (``LatencyStages``) of the chunks at ``indices`` that
        have them."""
        if self.latency_stages is None:
            return []
        found = (self.latency_stages.stages_ms(i) for i in indices)
        return [stages for stages in found if stages is not None]

    def settle_latencies(self, timeout_s: float = 1.0) -> bool:
        """Take /clock until every received chunk's latency is resolved (or
        ``timeout_s``); False when some stayed unresolved (a stopped clock)."""
        return self.spin_until(lambda: not self._unresolved, timeout_s)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            name = status.name.split(":", 1)[0]
            values = {kv.key: kv.value for kv in status.values}
            error = status.level == DiagnosticStatus.ERROR
            self.diagnostics[name] = values
            self.diag_messages[name] = status.message
            self.diag_errors[name] = error
            if error:
                entry = self.errors.setdefault(name, {"count": 0, "before_ready": 0,
                                                      "messages": []})
                entry["before_ready"] += not self.ready
                _count(entry, status.message)
            elif status.level == DiagnosticStatus.WARN and not self.ready:
                _count(self.startup_warnings.setdefault(name, {"count": 0, "messages": []}),
                       status.message)
            self.diag_counts[name] = self.diag_counts.get(name, 0) + 1
            if name == "pd_tracker_node":
                p99 = finite_or_none(values.get("period_error_ms_p99"))
                if p99 is not None:
                    self.tracker_p99.append((time.monotonic(), p99))

    def _on_episode(self, msg: String) -> None:
        report = json.loads(msg.data)
        self.episodes[report["episode"]] = report
        if report["status"] in OUTCOMES:
            self.ended.append(report)

    # -- waiting ----------------------------------------------------------------------------

    def check(self) -> None:
        """Raise CommanderStopped if ``stop_reason`` says so."""
        reason = self.stop_reason()
        if reason:
            raise CommanderStopped(reason)

    def spin_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Process callbacks until ``predicate()``; False after ``timeout_s`` (wall time)."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            self.check()
            if time.monotonic() > deadline:
                return False
            self.executor.spin_once(timeout_sec=0.05)
        return True

    def fresh_diagnostics(self, names: list[str], timeout_s: float = 3.0) -> None:
        """Wait (briefly) for one more /diagnostics message from each of ``names``."""
        start = {n: self.diag_counts.get(n, 0) for n in names}
        self.spin_until(lambda: all(self.diag_counts.get(n, 0) > start[n] for n in names),
                        timeout_s)

    def wait_until_ready(self, nodes=GRAPH_NODES, timeout_s: float = 180.0) -> bool:
        """Every node in ``nodes`` reports on /diagnostics, the policy is active and action
        chunks arrive; False after ``timeout_s`` (``not_ready_reason`` says what is missing).
        A policy that failed its configure transition raises CommanderStopped."""

        def ready() -> bool:
            return all(n in self.diagnostics for n in nodes) \
                and self._policy_state() == "active" and bool(self.chunks)

        self.ready = self.spin_until(ready, timeout_s)
        return self.ready

    def wait_until_policy_active(self, timeout_s: float = 180.0) -> bool:
        """policy_node reports ``active`` (loaded and warmed up); False after ``timeout_s``.
        A policy that failed its configure transition raises CommanderStopped."""
        return self.spin_until(lambda: self._policy_state() == "active", timeout_s)

    def _policy_state(self) -> str:
        policy = self.diagnostics.get("policy_node", {})
        if policy.get("state") == "unconfigured" and self.diag_errors.get("policy_node"):
            raise CommanderStopped("policy_node could not be configured: "
                                   f"{self.diag_messages['policy_node']}")
        return policy.get("state", "")

    def not_ready_reason(self, nodes=GRAPH_NODES) -> str:
        missing = [n for n in nodes if n not in self.diagnostics]
        policy = self.diag_messages.get("policy_node", "no diagnostics")
        return (f"no /diagnostics from {missing or 'none'}; policy_node: {policy}; chunks "
                f"received: {len(self.chunks)}")

    # -- commands ---------------------------------------------------------------------------

    def instruct(self, text: str) -> None:
        """Publish ``text`` on ``instruction`` (latched, as a person's ``ros2 topic pub``)."""
        self.instruction_pub.publish(String(data=text))

    def reset_episode(self, timeout_s: float = 30.0) -> int:
        """Start the next episode (``sim_node/reset``); returns its number.

        The episode has started when the reset answers or when ``sim/episode`` reports
        a newer episode, whichever comes first: a reply the middleware lost is only sent
        again at the writer's next heartbeat (seconds later under load), and the
        episode's record and chunk count must not start that late. A reset is never
        sent twice; ``resets_started_by_report`` counts those the report started."""
        known = max(self.episodes, default=0)

        def reported() -> bool:
            return max(self.episodes, default=0) > known

        response = self._call(self.reset_client, Trigger.Request(), timeout_s,
                              or_until=reported)
        if response is None:
            self.resets_started_by_report += 1
            return max(self.episodes)
        if not response.success:
            raise CommanderStopped(f"sim_node/reset failed: {response.message}")
        match = re.match(r"episode (\d+)", response.message)
        return int(match.group(1)) if match else known + 1

    def set_sim_paused(self, paused: bool, timeout_s: float = 30.0) -> None:
        """Hold (True) or resume (False) the simulation: ``sim_node/pause``
        (std_srvs/SetBool)."""
        self._call(self.pause_client, SetBool.Request(data=paused), timeout_s, repeat=True)

    def _call(self, client, request, timeout_s: float, repeat: bool = False,
              or_until: Callable[[], bool] = lambda: False):
        """The service's response to ``request``; CommanderStopped when the service is
        not there or does not answer within ``timeout_s``. ``repeat``: asked again every
        5 s while unanswered, for a request that may be repeated safely (a Fast DDS
        service can drop the response to a client it has not matched yet); a reset
        must not be. ``or_until``: another sign that the request took effect; None if
        it came before the response (which is then no longer awaited)."""
        if not self.spin_until(client.service_is_ready, timeout_s):
            raise CommanderStopped(f"service {client.srv_name} not available")
        deadline = time.monotonic() + timeout_s
        while True:
            future = client.call_async(request)
            wait_s = max(0.0, deadline - time.monotonic())

            def settled(future=future) -> bool:
                return future.done() or or_until()

            if self.spin_until(settled, min(5.0, wait_s) if repeat else wait_s):
                if future.done():
                    return future.result()
                client.remove_pending_request(future)
                return None
            client.remove_pending_request(future)
            if not repeat or time.monotonic() > deadline:
                raise CommanderStopped(f"{client.srv_name} did not answer within "
                                       f"{timeout_s:.0f} s")

    def episode_report(self, number: int, timeout_s: float = 30.0) -> dict:
        """The latest ``sim/episode`` report of episode ``number`` (waits for the first)."""
        if not self.spin_until(lambda: number in self.episodes, timeout_s):
            raise CommanderStopped(f"no sim/episode report for episode {number}")
        return self.episodes[number]

    def wait_for_episode_end(self, number: int, timeout_s: float) -> dict:
        """The report that ended episode ``number`` (success / wrong_object / timeout)."""
        def ended() -> bool:
            report = self.episodes.get(number)
            return report is not None and report["status"] in OUTCOMES

        if not self.spin_until(ended, timeout_s):
            raise CommanderStopped(f"episode {number} did not end within {timeout_s:.0f} s")
        return self.episodes[number]

    def sim_parameters(self, names: list[str], timeout_s: float = 10.0) -> dict:
        """``sim_node``'s parameters by name ({} if it does not answer)."""
        from rcl_interfaces.srv import GetParameters
        from rclpy.parameter import parameter_value_to_python

        client: Client = self.node.create_client(GetParameters, "sim_node/get_parameters")
        try:
            if not self.spin_until(client.service_is_ready, timeout_s):
                return {}
            future = client.call_async(GetParameters.Request(names=names))
            if not self.spin_until(future.done, timeout_s):
                return {}
            result = future.result()
            if result is None:
                return {}
            return {n: parameter_value_to_python(v)
                    for n, v in zip(names, result.values, strict=True)}
        finally:
            self.node.destroy_client(client)

    def episode_wall_limit_s(self) -> float:
        """How long (wall time) to wait for an episode: generous, as the achieved
        real-time factor drops when the CPU is shared."""
        params = self.sim_parameters(["time_limit_s", "real_time_factor"])
        limit_s = float(params.get("time_limit_s") or 20.0)
        rtf = float(params.get("real_time_factor") or 1.0)
        return 5.0 * limit_s / rtf + 60.0

    def object_names(self) -> list[str]:
        if self._object_names is None:
            self._object_names = _object_names()
        return self._object_names

    def seed_instruction(self, seed: int) -> str:
        """The instruction sim_node gives for ``seed`` (its own task)."""
        from diffusion_policy_ros.sim.runtime import seed_task

        return seed_task(seed, self.object_names()).instruction

    def switch_instruction(self, number: int, after_s: float, timeout_s: float) -> str:
        """Name another object now and episode ``number``'s own ``after_s`` seconds (ROS
        time: sim time with use_sim_time) later, unless it ended first; returns the first."""
        from diffusion_policy_ros.sim.runtime import seed_task
        from diffusion_policy_ros.sim.task import wrong_instruction

        seed = int(self.episode_report(number)["seed"])
        own = seed_task(seed, self.object_names())  # the sim follows the last instruction
        first = wrong_instruction(own.target, self.object_names(), seed)
        self.instruct(first)
        t0_ns = self.node.get_clock().now().nanoseconds

        def ended() -> bool:
            report = self.episodes.get(number)
            return report is not None and report["status"] in OUTCOMES

        def due() -> bool:
            return ended() or (self.node.get_clock().now().nanoseconds - t0_ns) * 1e-9 >= after_s

        self.spin_until(due, timeout_s)
        if not ended():
            self.instruct(own.instruction)
        return first

    def _episode_chunk_indices(self, report: dict, searched_from: int,
                               arrived: range) -> tuple[list[int], bool]:
        """The indices in ``chunks`` of the episode's own chunks, and whether they were
        chosen by stamp. On sim time, where stamps and the report share a clock: those
        received from ``searched_from`` on (the reset's request) whose observation stamp
        lies in the scored span (from ``sim_time_s - elapsed_s`` of the end report, up to
        but not including ``sim_time_s``), whenever they arrived; chunks still in flight
        are waited for until one stamped at or after the end arrives (``IN_FLIGHT_WAIT_S``
        at most). A reset this node learns of late (a reply or report lost and sent again
        at the writer's next heartbeat, seconds later) then costs the count nothing.
        Otherwise: the chunks that ``arrived`` between the reset and the end report."""
        if self._sim_to_wall is None or report.get("sim_time_s") is None:
            return list(arrived), False
        end_ns = round(float(report["sim_time_s"]) * 1e9)
        start_ns = end_ns - round(float(report["elapsed_s"]) * 1e9)
        self.spin_until(lambda: self._newest_chunk_stamp_ns >= end_ns, IN_FLIGHT_WAIT_S)
        stamps = self.chunk_stamps_ns
        return [i for i in range(searched_from, len(stamps))
                if start_ns <= stamps[i] < end_ns], True

    def run_episode(self, instruction: str | None = None, switch_after_s: float | None = None,
                    timeout_s: float | None = None, media_dir: Path | None = None) -> dict:
        """Reset, instruct (``instruction``, or the sim's own; ``switch_after_s``: another
        object's first), wait for the end; the episode's record with its chunk latencies.

        With ``record_media`` and ``media_dir``: ``episode_<seed>.gif`` and ``.png`` there.
        """
        timeout_s = self.episode_wall_limit_s() if timeout_s is None else timeout_s
        searched_from = len(self.chunks)
        number = self.reset_episode()
        if self.recorder is not None:
            self.recorder.start()
        if instruction is not None:
            self.instruct(instruction)
        start, first_chunk = time.monotonic(), len(self.chunks)
        first = None
        if switch_after_s is not None:
            first = self.switch_instruction(number, switch_after_s, timeout_s)
        report = self.wait_for_episode_end(number, timeout_s)
        indices, by_stamp = self._episode_chunk_indices(
            report, searched_from, range(first_chunk, len(self.chunks)))
        self.settle_latencies()
        latencies = [self.chunks[i][1] for i in indices]
        self.episode_chunk_latencies_ms.extend(latencies)
        self.episode_latency_stages_ms.extend(self.stages_ms(indices))
        record = {
            "episode": number, "seed": report["seed"], "status": report["status"],
            "target": report["target"],
            "instruction": instruction if instruction is not None else report["instruction"],
            "sim_instruction": report["instruction"],
            **({"first_instruction": first} if first is not None else {}),
            "wrong_object": report["wrong_object"], "elapsed_s": report["elapsed_s"],
            # The sim's own wall time over the scored span; this process's clock starts
            # after the reset's round trip (kept for a sim that does not report it).
            "wall_s": report.get("wall_s", round(time.monotonic() - start, 3)),
            "chunks": len(latencies),
            "chunk_latency_ms": percentiles(latencies),
            **({"chunks_in_span": len(indices)} if by_stamp else {}),
        }
        if self.recorder is not None and media_dir is not None:
            record["media"] = self.recorder.finish(
                Path(media_dir), f"episode_{record['seed']}",
                title=f"seed {record['seed']}: '{record['instruction']}' (target "
                      f"{record['target']}), ROS graph",
                caption=f"'{record['instruction']}': {record['status']}")
        return record
