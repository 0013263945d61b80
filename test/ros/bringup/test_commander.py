"""GraspCommander drives a graph it did not start, as a user's script would.

The graph is ``dpr bringup`` in run-until-signal mode (the same processes
``ros2 launch`` starts) with a tiny policy (it will not grasp: the episode ends at
the sim's 5 s limit); the commander in this process waits for it, instructs, runs
an episode and reads the diagnostics; SIGTERM then stops every node by PID and the
run's summary lists the commander's episode. A stand-in for the sim's reset service
(``late_reset_sim.py``) holds its reply back, as a lost DDS reply is.
"""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, PointCloud2
from trajectory_msgs.msg import JointTrajectory

from diffusion_policy_ros.ros.bringup.commander import GRAPH_NODES, GraspCommander
from diffusion_policy_ros.ros.bringup.statistics import OUTCOMES
from diffusion_policy_ros.ros.processes import stop_process

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
@pytest.mark.ros
def test_a_commander_drives_a_running_graph_and_sigterm_stops_it(
        tiny_bringup_command, background_bringup, bringup_env, assert_children_gone, tmp_path):
    out = tmp_path / "out"
    proc = background_bringup(tiny_bringup_command(
        out, "--sim-param", "time_limit_s:=5.0", "--sim-param", "auto_reset:=false",
        "--sim-param", "publish_instruction:=false"))
    with GraspCommander() as commander:
        commander.instruct("pick up the red cube")  # the start-up episode waits for one
        assert commander.wait_until_ready(timeout_s=180.0), commander.not_ready_reason()
        record = commander.run_episode("pick up the blue cube", timeout_s=120.0)
        assert set(GRAPH_NODES) <= set(commander.diagnostics)
        assert commander.diagnostics["policy_node"]["state"] == "active"
    assert record["status"] in OUTCOMES and record["target"] == "blue_cube"
    assert record["instruction"] == "pick up the blue cube"
    assert record["chunks"] > 0 and record["chunk_latency_ms"]["p50"] > 0
    assert record["elapsed_s"] >= 4.9  # the tiny policy does not lift: the limit ends it
    # The example script does the same from its command line.
    example = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "grasp_episodes.py"), "grasp the green cube"],
        capture_output=True, text=True, timeout=180, env=bringup_env)
    assert example.returncode == 0, example.stdout + example.stderr
    assert "'grasp the green cube' -> green_cube: " in example.stdout, example.stdout
    assert proc.poll() is None, (tmp_path / "stdout.txt").read_text()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, (tmp_path / "stdout.txt").read_text()
    summary = json.loads((out / "bringup_summary.json").read_text())
    assert summary["aborted"] == "SIGTERM" and summary["episodes_requested"] is None
    assert record["episode"] in [e["episode"] for e in summary["episodes"]]
    assert len(summary["episodes"]) >= 2  # the commander's and the example's (+ start-up)
    assert set(summary["processes"]) == set(GRAPH_NODES)
    assert_children_gone(summary)


@pytest.mark.ros
def test_an_episode_starts_at_its_report_when_the_reset_reply_is_late(tmp_path):
    """The reset's reply held back (a lost DDS sample is sent again only at a later
    heartbeat): the sim's ``sim/episode`` report of the new episode starts it, so its
    record and chunk count begin with the episode, not with the late reply."""
    hold_s = 120.0
    with open(tmp_path / "late_reset_sim.log", "w") as log:
        sim = subprocess.Popen([sys.executable, str(Path(__file__).with_name(
            "late_reset_sim.py")), str(hold_s)], stdout=log, stderr=subprocess.STDOUT)
    try:
        with GraspCommander(node_name="late_reset_commander") as commander:
            number = commander.reset_episode(timeout_s=60.0)  # < hold_s: the report started it
            assert number == 1 and commander.resets_started_by_report == 1
            assert commander.episodes[1]["status"] == "running"
    finally:
        stop_process(sim)
    assert sim.returncode is not None


def _chunk(stamp_ns: int) -> JointTrajectory:
    msg = JointTrajectory()
    msg.header.stamp = Time(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000)
    return msg


def _camera_info(stamp_ns: int) -> CameraInfo:
    msg = CameraInfo()
    msg.header.stamp = _chunk(stamp_ns).header.stamp
    return msg


def _points(stamp_ns: int) -> PointCloud2:
    msg = PointCloud2()
    msg.header.stamp = _chunk(stamp_ns).header.stamp
    return msg


def _clock(sim_ns: int) -> Clock:
    return Clock(clock=Time(sec=sim_ns // 1_000_000_000, nanosec=sim_ns % 1_000_000_000))


@pytest.mark.ros
def test_a_chunk_read_before_the_clock_that_covers_its_stamp_gets_its_latency_later():
    """On sim time the commander's executor may take a chunk before the /clock samples
    that bracket its stamp (one message per subscription per wake-up): the chunk waits
    for them instead of being counted as not measurable."""
    ms = 1_000_000
    with GraspCommander(use_sim_time=True) as commander:
        for sim_ms, wall_ms in ((1000, 5000), (1010, 5010)):
            commander._on_clock(_clock(sim_ms * ms), {"source_timestamp": wall_ms * ms})
        commander._on_chunk(_chunk(1005 * ms), {"received_timestamp": 5045 * ms})
        commander._on_chunk(_chunk(1025 * ms), {"received_timestamp": 5070 * ms})
        commander._on_chunk(_chunk(900 * ms), {"received_timestamp": 5080 * ms})
        assert commander.chunks[0][1] == pytest.approx(40.0)  # covered: resolved at once
        assert commander.chunks[1][1] != commander.chunks[1][1]  # NaN until its /clock
        commander._on_clock(_clock(1020 * ms), {"source_timestamp": 5020 * ms})
        assert commander._unresolved
        commander._on_clock(_clock(1030 * ms), {"source_timestamp": 5030 * ms})
        assert commander.chunks[1][1] == pytest.approx(45.0)
        assert commander.chunks[2][1] != commander.chunks[2][1]  # older than the window
        assert not commander._unresolved and commander.settle_latencies(timeout_s=0.0)
        assert commander.stages_ms(range(3)) == []  # no publication times: no stages


@pytest.mark.ros
def test_an_episodes_chunks_are_chosen_by_stamp_within_its_scored_span():
    """Chunks stamped before the episode's scoring began or after its end (the sim runs
    on until the next reset) are not its own, whenever they arrived; those that arrived
    before this node learnt of the reset (a lost reply, sent again seconds later) are."""
    ms = 1_000_000
    with GraspCommander(use_sim_time=True) as commander:
        for stamp_ms in (900, 1000, 1100, 2900, 3000, 3100):
            commander._on_chunk(_chunk(stamp_ms * ms), {"received_timestamp": 0})
        report = {"sim_time_s": 3.0, "elapsed_s": 2.0}  # scored from 1.0 s until 3.0 s
        # The reset was requested before the first chunk, its reply read after the third.
        assert commander._episode_chunk_indices(report, 0, range(3, 6)) == ([1, 2, 3], True)
        assert commander._episode_chunk_indices(report, 3, range(3, 6)) == ([3], True)
    with GraspCommander(use_sim_time=False) as commander:  # stamps on another clock
        commander._on_chunk(_chunk(1000 * ms), {"received_timestamp": 0})
        assert commander._episode_chunk_indices(report, 0, range(1)) == ([0], False)


@pytest.mark.ros
def test_the_latency_by_hop_from_each_hops_publication_time():
    ms = 1_000_000
    with GraspCommander(use_sim_time=True, latency_stages=True) as commander:
        for sim_ms, wall_ms in ((1000, 5000), (1010, 5010), (1020, 5020)):
            commander._on_clock(_clock(sim_ms * ms), {"source_timestamp": wall_ms * ms})
        commander._on_camera_info(_camera_info(1005 * ms), {"source_timestamp": 5014 * ms})
        commander._on_points(_points(1005 * ms), {"source_timestamp": 5021 * ms})
        commander._on_chunk(_chunk(1005 * ms), {"received_timestamp": 5035 * ms,
                                               "source_timestamp": 5034 * ms})
        (stages,) = commander.stages_ms(range(len(commander.chunks)))
        assert stages == pytest.approx({"frame": 9.0, "sync": 7.0, "policy": 13.0,
                                        "delivery": 1.0})
        assert sum(stages.values()) == pytest.approx(commander.chunks[0][1])


def _status(level: bytes, message: str) -> DiagnosticArray:
    return DiagnosticArray(status=[DiagnosticStatus(level=level, message=message,
                                                    name="pd_tracker_node: pd tracker")])


@pytest.mark.ros
def test_errors_count_from_the_first_diagnostics_and_start_up_warnings_apart():
    """An ERROR before the graph is ready counts (a tracker fault at start-up is one);
    the WARN states of start-up are kept apart, as expected ones."""
    with GraspCommander(node_name="diagnostics_commander") as commander:
        commander._on_diagnostics(_status(DiagnosticStatus.WARN, "waiting for joint_states"))
        commander._on_diagnostics(_status(DiagnosticStatus.ERROR, "fault: joint_states stale"))
        commander.ready = True
        commander._on_diagnostics(_status(DiagnosticStatus.ERROR, "fault: joint_states stale"))
        commander._on_diagnostics(_status(DiagnosticStatus.WARN, "loop at 400 Hz"))
        assert commander.errors == {"pd_tracker_node": {
            "count": 2, "before_ready": 1, "messages": ["fault: joint_states stale"]}}
        assert commander.startup_warnings == {"pd_tracker_node": {
            "count": 1, "messages": ["waiting for joint_states"]}}
