"""policy_node in its own process: lifecycle, action chunks, refusals, services.

A tiny policy is trained for a few steps on two collected demonstrations (the
node test checks plumbing, not grasp success); one recorded episode is replayed
as the observation stream (image + points at 30 Hz, stamped now) with
joint_states at 100 Hz.
"""

import math
import os
import re
import shutil
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState, PointCloud2
from std_msgs.msg import Header, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import Marker, MarkerArray

from diffusion_policy_ros.config import CONFIG_DIR, load_node_params
from diffusion_policy_ros.learning.collect import episode_name
from diffusion_policy_ros.learning.episode_bag import read_episode
from diffusion_policy_ros.ros.conversions import (
    ns_to_stamp,
    rgb8_image_msg,
    stamp_to_ns,
    xyzrgb_cloud_msg,
)

pytestmark = pytest.mark.ros
MODULE = "diffusion_policy_ros.ros.policy_node"
PARAMS = ["--params-file", str(CONFIG_DIR / "policy_node.yaml"),
          "-p", "diagnostics_period_s:=0.2", "-p", "device:=cpu"]
#: The simulated grasp task's chunk rules, a parameter file on top of the node's.
GRASP_RULES = ["--params-file", str(CONFIG_DIR / "grasp_rules.yaml")]
NAMES = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper_joint"]
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)


@pytest.fixture(scope="module")
def assets(tiny_checkpoint, tiny_demos):
    """(tiny checkpoint, one recorded episode)."""
    return tiny_checkpoint, read_episode(tiny_demos / episode_name(21))


class PolicyHarness:
    """Replays an episode as rgbd_sync_node + arm would; records what policy_node sends."""

    def __init__(self, ros, episode):
        self.ros = ros
        self.episode = episode
        node = ros.node
        self.image_pub = node.create_publisher(Image, "observation/image", QoSProfile(depth=2))
        self.points_pub = node.create_publisher(PointCloud2, "observation/points",
                                                QoSProfile(depth=2))
        self.joint_pub = node.create_publisher(JointState, "joint_states", QoSProfile(depth=10))
        self.instruction_pub = node.create_publisher(String, "instruction", LATCHED)
        self.chunks, self.markers, self.diags = [], [], []
        node.create_subscription(JointTrajectory, "policy/action_chunk",
                                 lambda m: self.chunks.append((time.monotonic(), m)),
                                 QoSProfile(depth=100))
        node.create_subscription(MarkerArray, "policy/markers", self.markers.append,
                                 QoSProfile(depth=10))
        node.create_subscription(DiagnosticArray, "/diagnostics", self.diags.append,
                                 QoSProfile(depth=50))
        self.status: list[str] = []
        node.create_subscription(String, "policy/status", lambda m: self.status.append(m.data),
                                 LATCHED)
        self.sent_stamps: set[int] = set()
        self.streaming = True
        self.stamp_delay_s = 0.0
        self.nan_points = False
        self.points_kept: int | None = None  # a cloud cut to this many points
        self.gripper_m: float | None = None  # the measured opening sent instead of the episode's
        self._frame = 0
        node.create_timer(1 / 30, self._publish_frame)
        node.create_timer(0.01, self._publish_joints)

    def _now_ns(self) -> int:
        return self.ros.node.get_clock().now().nanoseconds

    def _publish_frame(self):
        if not self.streaming:
            return
        ep, i = self.episode, self._frame % len(self.episode)
        self._frame += 1
        stamp_ns = self._now_ns() - int(self.stamp_delay_s * 1e9)
        header = Header(stamp=ns_to_stamp(stamp_ns), frame_id="base_link")
        points = ep.points[i].copy()
        if self.nan_points:
            points[5] = np.nan
        kept = self.points_kept or len(points)
        self.image_pub.publish(rgb8_image_msg(ep.images[i], header))
        self.points_pub.publish(xyzrgb_cloud_msg(points[:kept], ep.colors[i][:kept], header))
        self.sent_stamps.add(stamp_ns)

    def _publish_joints(self):
        i = max(0, self._frame - 1) % len(self.episode)
        position = self.episode.joint_positions[i].tolist()
        if self.gripper_m is not None:
            position[-1] = self.gripper_m
        msg = JointState(name=NAMES, position=position)
        msg.header.stamp = ns_to_stamp(self._now_ns())
        self.joint_pub.publish(msg)

    def instruct(self, text: str) -> None:
        self.instruction_pub.publish(String(data=text))

    def connected(self) -> bool:
        return all(p.get_subscription_count() > 0 for p in
                   (self.image_pub, self.points_pub, self.joint_pub, self.instruction_pub))

    def diagnostics(self) -> tuple[int | None, str, dict]:
        for arr in reversed(self.diags):
            for status in arr.status:
                if status.name.startswith("policy_node"):
                    return (status.level, status.message,
                            {kv.key: kv.value for kv in status.values})
        return None, "", {}

    def value(self, key: str, default: str = "") -> str:
        return self.diagnostics()[2].get(key, default)

    def count(self, key: str) -> int:
        return int(self.value(key, "0") or 0)

    def call(self, client, request, timeout_s: float = 60.0):
        self.ros.spin_until(lambda: client.service_is_ready(), 30.0,
                            f"service {client.srv_name}")
        future = client.call_async(request)
        self.ros.spin_until(future.done, timeout_s, f"response of {client.srv_name}")
        return future.result()

    def assert_no_new_chunks(self, seconds: float, what: str) -> None:
        before = len(self.chunks)
        self.ros.spin_for(seconds)
        assert len(self.chunks) == before, f"{what}: {len(self.chunks) - before} chunks"


def check_chunk(h: PolicyHarness, msg: JointTrajectory) -> None:
    assert list(msg.joint_names) == NAMES
    assert stamp_to_ns(msg.header.stamp) in h.sent_stamps
    assert len(msg.points) == 16
    for k, point in enumerate(msg.points):
        t = point.time_from_start.sec + point.time_from_start.nanosec * 1e-9
        assert t == pytest.approx(k * 0.1, abs=1e-9)
        assert len(point.positions) == 7 and all(math.isfinite(v) for v in point.positions)


def test_lifecycle_configure_warms_up_activate_acts_deactivate_stops(ros, start_node, assets):
    checkpoint, episode = assets
    node = start_node(MODULE, [*PARAMS, "-p", f"checkpoint:={checkpoint}"])
    h = PolicyHarness(ros, episode)
    change = ros.node.create_client(ChangeState, "policy_node/change_state")
    get_state = ros.node.create_client(GetState, "policy_node/get_state")

    def transition(tid: int) -> bool:
        return h.call(change, ChangeState.Request(transition=Transition(id=tid))).success

    ros.spin_until(lambda: h.connected() and h.value("state") == "unconfigured", 30.0,
                   lambda: f"policy_node up and unconfigured: {h.diagnostics()}\n{node.log()}")
    assert h.call(get_state, GetState.Request()).current_state.id == \
        State.PRIMARY_STATE_UNCONFIGURED
    h.instruct("pick up the red cube")
    h.assert_no_new_chunks(0.5, "unconfigured")

    t0 = time.monotonic()
    assert transition(Transition.TRANSITION_CONFIGURE), node.log()
    configure_s = time.monotonic() - t0
    assert "configured:" in node.log() and "warm-up chunks" in node.log()
    assert h.call(get_state, GetState.Request()).current_state.id == State.PRIMARY_STATE_INACTIVE
    ros.spin_until(lambda: h.value("state") == "inactive", 5.0, "inactive on diagnostics")
    h.assert_no_new_chunks(0.5, "inactive")

    assert transition(Transition.TRANSITION_ACTIVATE), node.log()
    ros.spin_until(lambda: len(h.chunks) >= 5, 15.0,
                   lambda: f"first chunks: {h.diagnostics()}\n{node.log()}")
    # Chunks at about rate_hz over a 3 s window, each with the contract's layout.
    start, t_start = len(h.chunks), time.monotonic()
    ros.spin_for(3.0)
    window = h.chunks[start:]
    rate_hz = len(window) / (time.monotonic() - t_start)
    for _, msg in window:
        check_chunk(h, msg)
    stamps = [stamp_to_ns(m.header.stamp) for _, m in window]
    # Observation ticks (the default): each chunk starts on the frame that completed its
    # observation, every third of the 30 Hz stream (100 ms of stamps apart, give or take a
    # frame). Only a watchdog tick (frames late by 1.5 periods) acts on a frame again.
    assert h.value("tick_source") == "observation"
    repeats = len(stamps) - len(set(stamps))
    assert stamps == sorted(stamps) and repeats <= h.count("watchdog_ticks"), stamps
    assert 66 < np.median(np.diff(stamps)) * 1e-6 < 134, np.diff(stamps) * 1e-6
    assert rate_hz > 7.0, f"{rate_hz} {h.diagnostics()}"
    ros.spin_until(lambda: h.value("first_chunk_ms") and h.value("chunk_rate_hz") and
                   float(h.value("chunk_rate_hz")) > 0, 5.0, "chunk statistics")
    values = h.diagnostics()[2]
    # Warm-up paid the one-off costs (language model load: seconds) before the first chunk.
    assert float(values["first_chunk_ms"]) < 1000.0, values
    print(f"\nconfigure {configure_s:.2f} s (warm-up {values['warmup_ms']} ms); chunks "
          f"{rate_hz:.2f} Hz; first chunk {values['first_chunk_ms']} ms; predict p50 "
          f"{values['predict_ms_p50']} p99 {values['predict_ms_p99']} ms; observation age p50 "
          f"{values['observation_age_ms_p50']} p99 {values['observation_age_ms_p99']} ms")

    assert transition(Transition.TRANSITION_DEACTIVATE), node.log()
    ros.spin_for(0.3)  # a chunk computed while deactivating is dropped or already delivered
    h.assert_no_new_chunks(1.0, "deactivated")
    assert h.value("state") == "inactive"
    assert node.alive(), node.log()


def test_refusals_instruction_change_and_start_stop(ros, start_node, assets):
    checkpoint, episode = assets
    node = start_node(MODULE, [*PARAMS, "-p", f"checkpoint:={checkpoint}",
                               "-p", "autostart:=true"])
    h = PolicyHarness(ros, episode)
    start = ros.node.create_client(Trigger, "policy_node/start")
    stop = ros.node.create_client(Trigger, "policy_node/stop")

    def refusal_is(reason: str):
        return lambda: h.value("refusal") == reason

    # Autostarted, streaming, but no instruction: refuses and says why.
    ros.spin_until(lambda: h.connected() and refusal_is("no_instruction")(), 30.0,
                   lambda: f"no_instruction refusal: {h.diagnostics()}\n{node.log()}")
    level, message, _ = h.diagnostics()
    assert level == DiagnosticStatus.WARN and "instruction" in message
    # The log line can reach the node's log file after the diagnostics reach us.
    ros.spin_until(lambda: "not acting yet: no instruction yet" in node.log(), 10.0,
                   lambda: f"no 'no instruction' log line:\n{node.log()}")
    assert not h.chunks and node.log().count("not acting yet: no instruction yet") == 1

    h.instruct("pick up the red cube")
    ros.spin_until(lambda: len(h.chunks) >= 3 and h.markers, 15.0,
                   lambda: f"chunks after the instruction: {h.diagnostics()}\n{node.log()}")
    check_chunk(h, h.chunks[-1][1])
    path, target = h.markers[-1].markers
    assert path.type == Marker.LINE_STRIP and path.header.frame_id == "base_link"
    assert len(path.points) == 16 and target.type == Marker.SPHERE
    assert stamp_to_ns(path.header.stamp) in h.sent_stamps
    # The arm model's tool stays within reach of the base (m).
    assert all(math.dist((p.x, p.y, p.z), (0, 0, 0)) < 1.5 for p in path.points)

    # A new instruction conditions the next chunks and starts a new task: the history
    # restarts, so no later chunk is conditioned on (stamped with) an older frame.
    sent_ns = h._now_ns()
    n = len(h.chunks)
    h.instruct("grab the blue cube")
    ros.spin_until(lambda: h.value("chunk_instruction") == "grab the blue cube"
                   and len(h.chunks) > n + 2, 5.0,
                   lambda: f"new instruction in use: {h.diagnostics()}")
    assert h.value("instruction") == "grab the blue cube"
    late = [stamp_to_ns(m.header.stamp) for _, m in h.chunks[n + 2:]]
    assert min(late) > sent_ns, (late, sent_ns)
    # The same words again are a new task too (a sim reset republishes them).
    restarts = h.count("history_restarts")
    assert restarts >= 2
    n = len(h.chunks)
    h.instruct("grab the blue cube")
    ros.spin_until(lambda: len(h.chunks) > n + 2 and h.count("history_restarts") == restarts + 1,
                   5.0, lambda: f"chunks after the repeated instruction: {h.diagnostics()}")

    # Words that name no object hold the arm, said on policy/status and /diagnostics; a
    # correction is read against the instruction before it.
    h.instruct("pick up the screwdriver")
    ros.spin_until(refusal_is("instruction_not_understood"), 5.0,
                   lambda: f"unread instruction: {h.diagnostics()}")
    h.assert_no_new_chunks(0.5, "an instruction naming no object")
    ros.spin_until(lambda: h.status and h.status[-1] == "holding: the instruction names no "
                   "object: 'pick up the screwdriver'", 5.0, lambda: f"status: {h.status}")
    n = len(h.chunks)
    h.instruct("no, the green one")
    ros.spin_until(lambda: h.value("chunk_instruction") == "pick up the green cube"
                   and len(h.chunks) > n + 2, 5.0, lambda: f"correction: {h.diagnostics()}")
    assert h.value("instruction") == "no, the green one"
    assert h.status[-1] == "acting on 'pick up the green cube'"

    # Observations that arrive but are 0.8 s old (max_obs_age_s 0.5): refused, no chunks.
    h.stamp_delay_s = 0.8
    ros.spin_until(refusal_is("stale_observation"), 5.0, lambda: f"stale: {h.diagnostics()}")
    h.assert_no_new_chunks(1.0, "stale observations")
    assert h.count("refused_stale_observation") > 0
    h.stamp_delay_s = 0.0
    n = len(h.chunks)
    ros.spin_until(lambda: len(h.chunks) > n + 2, 5.0, "chunks after fresh observations")

    # NaN in the points: refused and counted, then acting again.
    h.nan_points = True
    ros.spin_until(refusal_is("non_finite_points"), 5.0, lambda: f"NaN: {h.diagnostics()}")
    h.assert_no_new_chunks(0.5, "NaN points")
    assert h.count("refused_non_finite_points") > 0 and h.count("non_finite_frames_total") > 0
    h.nan_points = False
    n = len(h.chunks)
    ros.spin_until(lambda: len(h.chunks) > n + 2, 5.0, "chunks after finite points")

    # A sync node configured for another point count than the checkpoint's: one error
    # with both values and the parameter to change, on the log and /diagnostics; holds.
    expected = len(episode.points[0])
    h.points_kept = expected // 2
    ros.spin_until(refusal_is("observation_mismatch"), 5.0,
                   lambda: f"mismatch: {h.diagnostics()}")
    h.assert_no_new_chunks(1.0, "points of another count")
    level, message, _ = h.diagnostics()
    said = (f"observation/points has {expected // 2} points where the checkpoint expects "
            f"{expected}: set rgbd_sync_node's num_points to {expected}")
    assert level == DiagnosticStatus.ERROR and said in message, message
    assert h.count("dropped_num_points_mismatch") > 10
    assert node.log().count(said) == 1, node.log()
    h.points_kept = None
    n = len(h.chunks)
    ros.spin_until(lambda: len(h.chunks) > n + 2, 5.0, "chunks after the points fit again")

    # ~/stop and ~/start.
    response = h.call(stop, Trigger.Request())
    assert response.success, response.message
    ros.spin_for(0.3)
    h.assert_no_new_chunks(1.0, "after ~/stop")
    ros.spin_until(lambda: h.diagnostics()[1] == "stopped by ~/stop", 5.0, "stopped")
    response = h.call(start, Trigger.Request())
    assert response.success, response.message
    n = len(h.chunks)
    ros.spin_until(lambda: len(h.chunks) > n + 2, 5.0, "chunks after ~/start")

    # A stream that stops goes stale too: without frames the rate timer ticks.
    watchdog = h.count("watchdog_ticks")
    h.streaming = False
    ros.spin_until(lambda: refusal_is("stale_observation")()
                   and h.count("watchdog_ticks") > watchdog, 5.0,
                   lambda: f"stale after the stream stopped: {h.diagnostics()}")
    # A new task with no camera: the first frame is awaited quietly for max_obs_age_s
    # (a reset's first frame can be late), then the refusal is a warning.
    h.instruct("lift the green cube")
    ros.spin_until(refusal_is("no_observation"), 5.0,
                   lambda: f"no_observation after a new task: {h.diagnostics()}")
    ros.spin_until(lambda: "not acting (no_observation): no image+points pair since the "
                   "restart for a new task" in node.log(), 10.0,
                   lambda: f"no warning once the first frame stayed away:\n{node.log()}")
    assert h.count("refused_no_observation") > 0
    assert node.alive(), node.log()


def _log_lines_per_second(log: str, pattern: str, since_s: float) -> dict[int, int]:
    """Lines of ``log`` matching ``pattern``, by the wall-clock second of their stamps, from
    ``since_s`` on (rcutils stamps: ``[INFO] [1796671900.266583954] [policy_node]: ...``)."""
    per_second: dict[int, int] = {}
    for stamp, text in re.findall(r"^\[\w+\] \[(\d+\.\d+)\] \[[^]]*\]: (.*)$", log, re.M):
        if float(stamp) >= since_s and re.search(pattern, text):
            per_second[int(float(stamp))] = per_second.get(int(float(stamp)), 0) + 1
    return per_second


def _chunk_rate_hz(h: "PolicyHarness", start_ns: int, end_ns: int) -> float:
    """Chunks a second among those conditioned on observations stamped in the window (the
    stamps are this process's clock when it sent the frames: not the arrival times, which
    measure this process's own lateness as well)."""
    stamps = {stamp_to_ns(m.header.stamp) for _, m in h.chunks}
    return sum(start_ns <= s < end_ns for s in stamps) / ((end_ns - start_ns) * 1e-9)


@pytest.mark.parametrize("busy", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_instruction_input_is_bounded_and_a_flood_keeps_the_chunks_coming(
        ros, start_node, assets, request, busy):
    """A too-long instruction is refused whole with one log line, counted, and the current
    one stays; 300 alternating instructions a second for 3 s (``busy``: next to CPU
    burners) leave the chunk rate near its rate without the flood, and the log lines
    about instructions a few a second."""
    checkpoint, episode = assets
    node = start_node(MODULE, [*PARAMS, "-p", f"checkpoint:={checkpoint}",
                               "-p", "autostart:=true"])
    h = PolicyHarness(ros, episode)
    flood_pub = ros.node.create_publisher(String, "instruction", QoSProfile(depth=10))
    ros.spin_until(lambda: h.connected() and flood_pub.get_subscription_count() > 0
                   and h.value("state") == "active", 60.0,
                   lambda: f"policy_node active: {h.diagnostics()}\n{node.log()}")
    h.instruct("pick up the red cube")
    ros.spin_until(lambda: len(h.chunks) >= 5, 30.0,
                   lambda: f"first chunks: {h.diagnostics()}\n{node.log()}")
    if busy:  # from here on: the baseline and the flood alike
        request.getfixturevalue("cpu_burners")

    def window_rate(seconds: float) -> float:
        start_ns = h._now_ns()
        ros.spin_for(seconds)
        end_ns = h._now_ns()
        # the chunk of the window's last frames may still be on its way
        n = len(h.chunks)
        ros.wait_for(lambda: len(h.chunks) > n, 1.0)
        return _chunk_rate_hz(h, start_ns, end_ns - int(0.2e9))

    baseline_hz = window_rate(3.0)

    # A megabyte: refused whole, one short line, counted; the current instruction stays.
    h.instruct("pick up the red cube " * 50_000)
    ros.spin_until(lambda: h.count("instructions_refused_too_long") == 1, 15.0,
                   lambda: f"the refusal counted: {h.diagnostics()}\n{node.log()[-3000:]}")
    assert h.value("instruction") == "pick up the red cube"
    ros.spin_until(lambda: "instruction refused (1050000 characters" in node.log(), 10.0,
                   lambda: f"the refusal's line\n{node.log()[-3000:]}")
    refused = [line for line in node.log().splitlines() if "instruction refused" in line]
    assert len(refused) == 1 and len(refused[0]) < 300, refused
    assert "... (1050000 chars)" in refused[0] and "instruction_max_chars 256" in refused[0]
    assert "pick up the red cube " * 5 not in node.log()

    # The flood: alternating words, 300 a second (paced on the wall clock).
    words = ("pick up the red cube", "grab the blue cube")
    received = h.count("instructions_received")
    flood_start_s, start_ns, sent = time.time(), h._now_ns(), 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.0:
        flood_pub.publish(String(data=words[sent % 2]))
        sent += 1
        while time.monotonic() < t0 + sent / 300 and time.monotonic() - t0 < 3.0:
            ros.executor.spin_once(timeout_sec=max(0.0, t0 + sent / 300 - time.monotonic()))
    flood_s = time.monotonic() - t0
    end_ns = h._now_ns()
    n = len(h.chunks)
    ros.wait_for(lambda: len(h.chunks) > n, 1.0)
    flood_hz = _chunk_rate_hz(h, start_ns, end_ns - int(0.2e9))
    last = words[(sent - 1) % 2]
    # The newest words are taken once the interval has passed: never lost. (The depth-10
    # queue keeps the newest: a node slower than the flood loses older ones on the way.)
    ros.spin_until(lambda: h.value("instruction") == last
                   and h.count("instructions_received") > received + 10, 10.0,
                   lambda: f"the flood counted: {h.diagnostics()}")
    ros.spin_until(lambda: h.value("chunk_instruction") == last, 10.0,
                   lambda: f"chunks with the last words: {h.diagnostics()}")
    taken, coalesced = h.count("instructions_taken"), h.count("instructions_coalesced")
    # A burst of three, then one new task per 0.5 s: the flood started a handful.
    assert taken <= 1 + 3 + flood_s / 0.5 + 2, h.diagnostics()
    assert coalesced >= h.count("instructions_received") - received - taken, h.diagnostics()
    print(f"\nflood of {sent / flood_s:.0f} instructions/s ({sent} sent, "
          f"{h.count('instructions_received') - received} received): chunks {flood_hz:.1f}/s "
          f"(without: {baseline_hz:.1f}/s); {taken} instructions taken, {coalesced} "
          f"coalesced; instruction log lines per second "
          f"{_log_lines_per_second(node.log(), r'instruction', flood_start_s - 1.0)}")
    assert flood_hz >= 0.6 * baseline_hz, (flood_hz, baseline_hz, h.diagnostics())
    # Log lines about instructions: a few a second, whatever the rate.
    lines = _log_lines_per_second(node.log(), r"instruction", flood_start_s - 1.0)
    assert sum(lines.values()) <= 3 + 2 * flood_s + 4 and max(lines.values()) <= 6, lines
    assert node.alive(), node.log()


def test_the_no_instruction_hint_names_the_topic_in_the_nodes_namespace(start_node, assets):
    checkpoint, _ = assets
    node = start_node(MODULE, [*PARAMS, "-p", f"checkpoint:={checkpoint}",
                               "-p", "autostart:=true", "-r", "__ns:=/cell1"])
    deadline = time.monotonic() + 60.0
    while "not acting yet" not in node.log():
        assert time.monotonic() < deadline and node.alive(), node.log()
        time.sleep(0.2)  # ok-sleep: poll interval of a deadline-bounded wait on the log
    hint = next(line for line in node.log().splitlines() if "not acting yet" in line)
    assert ("publish one on '/cell1/instruction' (std_msgs/String), e.g. ros2 topic pub "
            "--once --keep-alive 2 /cell1/instruction std_msgs/msg/String") in hint, hint
    assert "active: acting at 10 Hz once an instruction comes" in node.log()


@pytest.mark.slow  # the grasp rules, off by default
def test_a_gripper_closed_on_nothing_is_reopened(ros, start_node, assets):
    """grasp_retry.* (config/grasp_rules.yaml): joint_states report the gripper closed on
    nothing; after empty_for_s the chunks hold it at open_to_m for open_for_s, max_retries
    times."""
    checkpoint, episode = assets
    open_to_m = 0.05  # an opening the policy's own chunks do not hold exactly
    node = start_node(MODULE, [*PARAMS, *GRASP_RULES, "-p", f"checkpoint:={checkpoint}",
                               "-p", "autostart:=true", "-p", "grasp_retry.empty_for_s:=0.3",
                               "-p", "grasp_retry.open_for_s:=0.5",
                               "-p", f"grasp_retry.open_to_m:={open_to_m}",
                               "-p", "grasp_retry.max_retries:=1"])
    h = PolicyHarness(ros, episode)

    def held_open(msg) -> bool:
        return all(p.positions[-1] == open_to_m for p in msg.points)

    ros.spin_until(h.connected, 30.0, lambda: f"policy_node up\n{node.log()}")
    h.instruct("pick up the red cube")
    ros.spin_until(lambda: len(h.chunks) >= 3, 30.0,
                   lambda: f"first chunks: {h.diagnostics()}\n{node.log()}")
    assert not any(held_open(m) for _, m in h.chunks)
    closed_at = len(h.chunks)
    h.gripper_m = 0.0
    ros.spin_until(lambda: any(held_open(m) for _, m in h.chunks[closed_at:]), 10.0,
                   lambda: f"a re-opening: {h.diagnostics()}\n{node.log()}")
    first = next(k for k in range(closed_at, len(h.chunks)) if held_open(h.chunks[k][1]))
    opened_ns = stamp_to_ns(h.chunks[first][1].header.stamp)
    # max_retries 1: once open_for_s has passed, the policy's own gripper commands return
    # although the gripper still reads closed.
    ros.spin_until(lambda: any(stamp_to_ns(m.header.stamp) > opened_ns + 0.6e9
                               for _, m in h.chunks[first:]), 10.0, "chunks after the retry")
    later = [m for _, m in h.chunks[first:] if stamp_to_ns(m.header.stamp) > opened_ns + 0.6e9]
    assert not any(held_open(m) for m in later)
    ros.spin_until(lambda: h.count("grasp_retries_total") == 1, 5.0,
                   lambda: f"grasp_retries_total: {h.diagnostics()}")
    # the operator reads why the gripper opened, once
    ros.spin_until(lambda: "chunk rule (reopened" in node.log(), 5.0, node.log)
    assert node.log().count("chunk rule (reopened") == 1, node.log()
    assert "chunk rules: EmptyGraspRetry, StalledGraspLift" in node.log()
    for _, msg in h.chunks[first:]:
        for point in msg.points:  # the arm columns are the policy's in every chunk
            assert all(math.isfinite(q) for q in point.positions)
    assert node.alive(), node.log()


def test_timer_ticks_act_at_rate_whatever_the_frames(ros, start_node, assets):
    """tick_source timer: the rate_hz timer starts every chunk, at any phase to the
    camera; a busy machine can make it act on the same newest frame twice."""
    checkpoint, episode = assets
    node = start_node(MODULE, [*PARAMS, "-p", f"checkpoint:={checkpoint}",
                               "-p", "autostart:=true", "-p", "tick_source:=timer",
                               "-p", "inference_priority:=20"])
    h = PolicyHarness(ros, episode)
    ros.spin_until(lambda: h.connected() and h.value("state") == "active", 30.0,
                   lambda: f"active: {h.diagnostics()}\n{node.log()}")
    h.instruct("pick up the red cube")
    ros.spin_until(lambda: len(h.chunks) >= 8, 15.0,
                   lambda: f"chunks on the timer: {h.diagnostics()}\n{node.log()}")
    for _, msg in h.chunks:
        check_chunk(h, msg)
    stamps = [stamp_to_ns(m.header.stamp) for _, m in h.chunks]
    assert stamps == sorted(stamps) and len(set(stamps)) >= 0.5 * len(stamps), stamps
    assert h.value("tick_source") == "timer" and h.count("watchdog_ticks") == 0
    # config/policy_node.yaml's niceness -10 and the inference thread under SCHED_FIFO
    # where the process may have them (root, CAP_SYS_NICE); otherwise as started, with
    # the reasons logged.
    fifo = "inference thread SCHED_FIFO 20"
    if os.geteuid() == 0:
        assert h.value("scheduling") == f"niceness -10, {fifo}", node.log()
    else:
        assert "no permission for niceness -10" in node.log() or \
            h.value("scheduling").startswith("niceness -10")
        assert "no permission for SCHED_FIFO priority 20" in node.log() or \
            h.value("scheduling").endswith(fifo)
    assert node.alive(), node.log()


def test_missing_checkpoint_fails_configure_cleanly(ros, start_node, tmp_path):
    missing = tmp_path / "no_such_checkpoint"
    node = start_node(MODULE, [*PARAMS, "-p", f"checkpoint:={missing}", "-p", "autostart:=true"])
    change = ros.node.create_client(ChangeState, "policy_node/change_state")
    diags = []
    ros.node.create_subscription(DiagnosticArray, "/diagnostics", diags.append,
                                 QoSProfile(depth=50))
    ros.spin_until(lambda: "autostart: configure failed" in node.log(), 30.0,
                   lambda: f"autostart failure\n{node.log()}")
    assert "CheckpointNotFoundError" in node.log() and str(missing) in node.log()
    # Configuring again fails again: a repeated request is harmless.
    answer = ros.call_idempotent(change, ChangeState.Request(
        transition=Transition(id=Transition.TRANSITION_CONFIGURE)), what="configure response")
    assert not answer.success

    def status():
        return next((s for a in reversed(diags) for s in a.status
                     if s.name.startswith("policy_node")), None)

    ros.spin_until(lambda: status() is not None, 5.0, "diagnostics")
    assert status().level == DiagnosticStatus.ERROR and "does not exist" in status().message
    assert node.alive(), node.log()


def test_a_publisher_the_observation_readers_cannot_take_is_named(ros, start_node, tmp_path):
    node = start_node(MODULE, [*PARAMS, "-p", f"checkpoint:={tmp_path / 'unused'}"])
    best_effort = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
    ros.node.create_publisher(PointCloud2, "observation/points", best_effort)
    ros.spin_until(lambda: "observation/points: publisher" in node.log(), 30.0,
                   lambda: f"the incompatible-QoS warning\n{node.log()}")
    assert "cannot take: no observations from it" in node.log()
    assert "observation/image: publisher" not in node.log()
    assert node.alive(), node.log()


@pytest.fixture
def corrupt_checkpoint(assets, tmp_path):
    copy = tmp_path / "corrupt"
    shutil.copytree(assets[0], copy)
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    return copy


@pytest.fixture(scope="module")
def exported(assets, tmp_path_factory):
    """The tiny checkpoint's ONNX graphs (dpr export), and a copy claiming other weights."""
    pytest.importorskip("onnxruntime")
    from diffusion_policy_ros.policy.checkpoint import load_checkpoint
    from diffusion_policy_ros.policy.export import MANIFEST, export_onnx

    policy, meta = load_checkpoint(assets[0])
    good = tmp_path_factory.mktemp("onnx")
    export_onnx(policy, good, meta["weights_sha256"])
    other = tmp_path_factory.mktemp("onnx_other")
    shutil.copytree(good, other, dirs_exist_ok=True)
    manifest = (other / MANIFEST).read_text().replace(meta["weights_sha256"], "0" * 64)
    (other / MANIFEST).write_text(manifest)
    return good, other


@pytest.mark.parametrize("case, overrides, expected", [
    ("empty", {"checkpoint": ""}, "parameter 'checkpoint' is empty"),
    ("corrupt", {}, "CheckpointCorruptError"),
    ("mismatch", {"joint_names": ["a1", "a2", "a3", "a4", "a5", "a6"]},
     "CheckpointMismatchError"),
    ("npu", {"device": "npu"}, "torch_npu"),
    ("onnx_missing", {"backend": "onnxruntime"}, "export the checkpoint first"),
    ("onnx_other_weights", {"backend": "onnxruntime"}, "exported from other weights"),
    ("onnx_other_steps", {"backend": "onnxruntime", "num_inference_steps": 5},
     "exported with num_inference_steps"),
    ("onnx_on_cuda", {"backend": "onnxruntime", "device": "cuda"}, ""),
    ("aot_missing", {"backend": "aotinductor"},
     "export the checkpoint first (dpr export --format aotinductor"),
    ("aot_from_onnx_dir", {"backend": "aotinductor"}, "aot.json not found"),
    ("lift_without_kinematics", {"urdf_file": "/nonexistent/arm.urdf",
                                 **load_node_params(CONFIG_DIR / "grasp_rules.yaml",
                                                    "policy_node")},
     "grasp_lift.enabled needs the arm's kinematics: cannot read the arm's kinematics from "
     "'/nonexistent/arm.urdf'"),
])
def test_configure_failures_return_failure_with_the_reason(ros, assets, corrupt_checkpoint,
                                                            exported, case, overrides,
                                                            expected):
    """In process: every configure failure is FAILURE with a message, never an exception."""
    from rclpy.lifecycle import TransitionCallbackReturn

    from diffusion_policy_ros.ros.policy_node import PolicyNode

    graph_dir = {"onnx_other_weights": exported[1], "onnx_other_steps": exported[0],
                 "aot_from_onnx_dir": exported[0]}.get(case)
    # niceness 0: in this process a node's niceness would be the whole test run's.
    params = {"checkpoint": str(corrupt_checkpoint if case == "corrupt" else assets[0]),
              "num_threads": 0, "niceness": 0, **overrides}
    if graph_dir is not None:
        params["graph_dir"] = str(graph_dir)
    node = PolicyNode(context=ros.context, parameter_overrides=[
        Parameter(k, value=v) for k, v in params.items()])
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert expected in node._error, node._error
        assert node.runner is None
    finally:
        node.destroy_node()


@pytest.mark.parametrize("backend", ["onnxruntime", "aotinductor"])
def test_a_static_graph_backend_acts(ros, start_node, assets, request, backend):
    """backend: onnxruntime | aotinductor runs the exported graphs: chunks of the
    contract's layout."""
    checkpoint, episode = assets
    if backend == "onnxruntime":
        graph_dir = request.getfixturevalue("exported")[0]
    else:
        checkpoint, graph_dir, _ = request.getfixturevalue("tiny_aot_student")
    node = start_node(MODULE, [*PARAMS, "-p", f"checkpoint:={checkpoint}",
                               "-p", f"backend:={backend}", "-p", f"graph_dir:={graph_dir}",
                               "-p", "autostart:=true"])
    h = PolicyHarness(ros, episode)
    h.instruct("pick up the red cube")
    ros.spin_until(lambda: len(h.chunks) >= 5, 30.0,
                   lambda: f"chunks from {backend}: {h.diagnostics()}\n{node.log()}")
    for _, msg in h.chunks[-3:]:
        check_chunk(h, msg)
    assert f"{backend})" in node.log()
    # The image, published before its cloud, is encoded while the cloud is on its way;
    # the chunk then runs the cloud's encoder.
    def encoded(key: str) -> bool:
        try:
            return float(h.value(key, "nan")) > 0
        except ValueError:
            return False

    ros.spin_until(lambda: encoded("cloud_encoder_ms_p50") and encoded(
        "image_encoder_ahead_ms_p50") and h.count("images_encoded_ahead_total") > 0, 5.0,
                   lambda: f"encoder stages on diagnostics: {h.diagnostics()}")
    assert node.alive(), node.log()
