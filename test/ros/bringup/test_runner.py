"""dpr bringup: the node graph of grasp.launch.py as processes; N scored episodes; clean stop.

The end-to-end tests run ``dpr bringup`` as a subprocess with a tiny policy
(2 demos, 2 training steps: it will not grasp, so the episode ends at the
sim's time limit, shortened to 5 s) and check the summary and that no node
process outlives the command.
"""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from diffusion_policy_ros.ros.bringup.statistics import OUTCOMES

NODES = {"sim_node", "rgbd_sync_node", "policy_node", "pd_tracker_node"}


@pytest.mark.slow
@pytest.mark.ros
@pytest.mark.parametrize("extra", [[], ["--namespace", "arm_left", "--use-sim-time",
                                         "--latency-stages"]],
                         ids=["wall-time", "namespaced-sim-time"])
def test_one_episode_through_the_real_nodes(tiny_bringup_command, bringup_env,
                                            assert_children_gone, tmp_path, extra):
    out = tmp_path / "out"
    cmd = tiny_bringup_command(out, "--sim", "--episodes", "1", "--seed", "3",
                       "--sim-param", "time_limit_s:=5.0", "--policy-param", "backend:=torch",
                       *extra)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=bringup_env)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                     for p in sorted((out / "logs").glob("*.log")))
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{logs}"
    summary = json.loads((out / "bringup_summary.json").read_text())
    assert summary["episodes_requested"] == 1 and summary["aborted"] is None
    (episode,) = summary["episodes"]
    assert episode["status"] in OUTCOMES and episode["seed"] == 3
    assert episode["status"] != "success"  # a 2-step policy: the 5 s limit ends it
    assert summary["success_rate"] + summary["wrong_object_rate"] + summary["timeout_rate"] == 1
    latency = summary["chunk_latency_ms"]
    assert latency["count"] > 0 and math.isfinite(latency["p50"]) and latency["p50"] > 0
    # Over the episode's own chunks, not those read late while its media were written.
    assert latency["count"] == episode["chunks"] > 0
    by_hop = summary["chunk_latency_stages_ms"]
    if "--latency-stages" in extra:
        # The same latency hop by hop, from each hop's publication time: the stages add up.
        assert by_hop["policy"]["count"] > 0 and by_hop["policy"]["p50"] > 0
        assert 0.5 * latency["p50"] < sum(s["p50"] for s in by_hop.values()) \
            < 2 * latency["p50"]
    else:
        assert all(s["count"] == 0 for s in by_hop.values())  # off by default: no readers
    # --out: the episode as a GIF (thinned to 10 frames per sim second from a best-effort
    # subscription that never slows the graph: on a saturated machine it keeps fewer, 18 of
    # the 5 s episode's 50 in one run) and a plot
    with Image.open(episode["media"]["gif"]) as gif:
        assert gif.n_frames >= 10
    assert Path(episode["media"]["plot"]).stat().st_size > 10_000
    if "--use-sim-time" in extra:
        # The simulator's synchronous mode: a tracker tick per joint_states, the physics
        # waiting for each command.
        assert summary["tracker_tick_source"] == "joint_states"
        assert summary["sim_lockstep"] == "on"
        assert math.isfinite(summary["sim_lockstep_wait_ms"]["p50"])
        assert summary["sim_lockstep_resends"] >= 0
        assert "tracker ticks on joint_states, sim lockstep on" in result.stdout
        # The policy's chunks by observation stamp over the episode's sim time: at most
        # one per 10 Hz observation.
        assert 0 < episode["chunks_in_span"] <= 10 * episode["elapsed_s"] + 1
        assert summary["policy_chunk_rate_of"] == "episodes"
        assert "stamped in the episodes, per sim second" in result.stdout
    else:
        assert "chunks_in_span" not in episode
        assert summary["policy_chunk_rate_of"] == "last_window"
        jitter = summary["tracker_period_error_ms"]
        assert all(math.isfinite(jitter[k]) for k in ("p50", "p99"))
        assert summary["tracker_tick_source"] == "timer"
        assert summary["tracker_loop_rate_hz"] > 100
        assert "period error p50" in result.stdout
    achieved = episode["elapsed_s"] / episode["wall_s"]
    if "--use-sim-time" in extra or achieved > 0.8:
        assert summary["tracker_safety"]["overspeed_stops"] == 0, result.stdout
    else:
        # On the wall clock a sim that falls behind real time is no longer a real-time plant
        # (the controller's reference runs on while the physics lags; sim time + lockstep is
        # the remedy, tested saturated below). What it owes is to say so, and the tracker's
        # safety stops contain what follows.
        assert summary["sim_real_time_factor"] < 0.9, (achieved, result.stdout)
    assert summary["policy_predict_ms"]["p50"] > 0
    assert set(summary["processes"]) == NODES
    assert_children_gone(summary)
    assert "success rate" in result.stdout
    assert isinstance(summary["diagnostics_errors"], dict)
    # The KEY:=VALUE overrides are the nodes', not remap rules of dpr bringup's own node
    # (rcl reads backend:=torch in a process's argv as one and warns).
    assert "remap rule" not in result.stdout + result.stderr
    assert "ERROR on /diagnostics from start-up on: " in result.stdout


@pytest.mark.slow
@pytest.mark.ros
def test_sigterm_stops_every_node(tiny_bringup_command, background_bringup,
                                  assert_children_gone, tmp_path):
    """Run-until-signal mode (no sim, so no chunks): SIGTERM stops the children by PID."""
    out = tmp_path / "out"
    stdout = tmp_path / "stdout.txt"
    proc = background_bringup(tiny_bringup_command(out, "--no-sim"))
    # Up when every node has logged its start-up line (policy: after load + warm-up).
    markers = {"rgbd_sync_node": "ready", "policy_node": "active", "pd_tracker_node": "ready"}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        logs = {n: out / "logs" / f"{n}.log" for n in markers}
        if all(p.exists() and markers[n] in p.read_text() for n, p in logs.items()):
            break
        time.sleep(0.2)  # ok-sleep: poll interval of a deadline-bounded wait on log files
    assert proc.poll() is None, stdout.read_text()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, stdout.read_text()
    summary = json.loads((out / "bringup_summary.json").read_text())
    assert summary["aborted"] == "SIGTERM" and summary["episodes_requested"] is None
    assert set(summary["processes"]) == NODES - {"sim_node"}
    assert_children_gone(summary)


@pytest.mark.slow
@pytest.mark.ros
def test_a_changed_instruction_is_pursued_through_the_nodes(tmp_path, assert_children_gone):
    """A changed instruction through the nodes (`--switch-after`): another object named
    first, the episode's own 1 s of sim time later; the first-named object is never
    lifted and the new target is (seeds 5016-5017: 2 of 2 in each of two 5-episode runs
    of seeds 5014-5018, docs/reference/nodes.md; at least one asked for, as the noise is
    unseeded)."""
    from diffusion_policy_ros.sim.task import parse_instruction

    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "diffusion_policy_ros.cli", "bringup", "--out", str(out),
           "--device", "cpu", "--episodes", "2", "--seed", "5016", "--switch-after", "1.0",
           "--use-sim-time", "--sim-param", "real_time_factor:=0.3"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                            env=os.environ.copy())
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    summary = json.loads((out / "bringup_summary.json").read_text())
    objects = ["red_cube", "green_cube", "blue_cube", "yellow_cylinder", "purple_cylinder"]
    logged = (out / "logs" / "policy_node.log").read_text()
    for episode in summary["episodes"]:
        first = parse_instruction(episode["first_instruction"], objects)
        assert first not in (None, episode["target"])
        assert parse_instruction(episode["instruction"], objects) == episode["target"]
        assert episode["wrong_object"] == "", result.stdout
        assert logged.index(episode["first_instruction"]) < logged.rindex(episode["instruction"])
    assert len(summary["episodes"]) == 2, result.stdout
    assert any(e["status"] == "success" for e in summary["episodes"]), result.stdout
    # Counted from start-up on: none once the graph was ready.
    assert all(e["count"] == e["before_ready"] for e in summary["diagnostics_errors"].values()), \
        result.stdout
    assert_children_gone(summary)


@pytest.mark.slow
@pytest.mark.ros
def test_the_shipped_policy_lifts_the_object_on_a_saturated_machine(tmp_path, cpu_burners,
                                                                    bringup_env,
                                                                    assert_children_gone):
    """Two CPU burners per core next to the four nodes, real time asked for: the sim's
    lockstep slows sim time instead of destabilising the arm, and the episode succeeds.

    A sim starved for longer than ``lockstep_timeout_s`` free-runs with expiring efforts
    until commands return (its designed fallback, seen in one of several runs): which of
    the two the last report shows is chance; the safety counters are the property."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "diffusion_policy_ros.cli", "bringup", "--out", str(out),
           "--device", "cpu", "--episodes", "1", "--seed", "5001", "--use-sim-time",
           "--sim-param", "real_time_factor:=1.0"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=bringup_env)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                     for p in sorted((out / "logs").glob("*.log")))
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{logs}"
    summary = json.loads((out / "bringup_summary.json").read_text())
    print(result.stdout)
    assert summary["outcome_counts"]["success"] == 1, f"{result.stdout}\n{logs}"
    assert summary["sim_lockstep"] in ("on", "free_run")
    assert summary["tracker_tick_source"] == "joint_states"
    assert summary["tracker_safety"]["overspeed_stops"] == 0
    assert summary["tracker_safety"]["path_aborts"] == 0
    assert summary["sim_real_time_factor"] < 1.0
    assert_children_gone(summary)
