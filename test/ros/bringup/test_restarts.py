"""dpr bringup keeps the graph up: a killed rgbd_sync_node is started again while the tracker
holds the arm, a user's parameter file is in effect, and Ctrl-C (SIGINT to the terminal's
process group) stops every node with status 0 and no traceback."""

import json
import os
import re
import signal
import time

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile
from trajectory_msgs.msg import JointTrajectory

from diffusion_policy_ros.ros.conversions import stamp_to_ns


@pytest.mark.slow
@pytest.mark.ros
def test_a_killed_sync_node_is_restarted_while_the_arm_holds_and_ctrl_c_ends_cleanly(
        ros, ros2_command, tiny_bringup_command, bringup_env, assert_children_gone, tmp_path):
    modes: list[str] = []  # pd_tracker_node's mode, per diagnostics message

    def on_diagnostics(msg):
        modes.extend(kv.value for s in msg.status if s.name.startswith("pd_tracker_node")
                     for kv in s.values if kv.key == "mode")
    ros.node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics,
                                 QoSProfile(depth=50))
    stamps: list[int] = []  # the chunks' observation stamps (the wall clock here)
    ros.node.create_subscription(JointTrajectory, "policy/action_chunk",
                                 lambda msg: stamps.append(stamp_to_ns(msg.header.stamp)),
                                 QoSProfile(depth=10))
    mine = tmp_path / "mine.yaml"  # one episode for the whole test: no reset moves the arm
    mine.write_text("/**/sim_node:\n  ros__parameters:\n    time_limit_s: 600.0\n"
                    "/**/policy_node:\n  ros__parameters:\n    device: cuda\n")
    out = tmp_path / "out"
    run = ros2_command(tiny_bringup_command(out, "--params-file", str(mine)), bringup_env,
                       "bringup")
    run.wait_for(lambda log: "ready after" in log, 180.0, "chunks flowing")
    # The file overrides sim.yaml; the --device cpu given overrides the file.
    assert ros.parameters("/sim_node", ["time_limit_s"]) == {"time_limit_s": 600.0}
    assert ros.parameters("/policy_node", ["device"]) == {"device": "cpu"}

    pid = int(re.search(r"started rgbd_sync_node \(pid (\d+)\)", run.log()).group(1))
    seen = len(modes)
    killed_ns = time.time_ns()
    os.kill(pid, signal.SIGKILL)
    ros.spin_until(lambda: "holding" in modes[seen:], 20.0,
                   lambda: f"the tracker holding the arm: {modes[seen:]}\n{run.log()[-3000:]}")
    run.wait_for(lambda log: log.count("started rgbd_sync_node (pid") == 2, 30.0, "the restart")
    assert re.search(r"rgbd_sync_node exited \(signal SIGKILL\) after [\d.]+ s: restarting it "
                     r"in 1\.0 s \(restart 1; 1 in a row of at most 3\)", run.log()), run.log()
    # Chunks on observations made after the kill: the new sync node's.
    ros.spin_until(lambda: stamps and stamps[-1] > killed_ns, 60.0,
                   lambda: f"chunks on new observations\n{run.log()[-3000:]}")
    seen = len(modes)
    ros.spin_until(lambda: "tracking" in modes[seen:], 10.0,
                   lambda: f"chunks tracked again: {modes[seen:]}\n{run.log()[-3000:]}")

    t0 = time.monotonic()
    assert run.interrupt(group=True) == [], run.log()
    stopped_s = time.monotonic() - t0
    assert run.proc.returncode == 0, run.log()
    assert stopped_s < 5.0, (stopped_s, run.log())
    summary = json.loads((out / "bringup_summary.json").read_text())
    assert summary["aborted"] == "SIGINT"
    assert summary["restarts"] == {"rgbd_sync_node": 1, "policy_node": 0}
    assert summary["processes"]["rgbd_sync_node"]["exits"][0].startswith("signal SIGKILL")
    assert {name: p["exit_status"] for name, p in summary["processes"].items()} == dict.fromkeys(
        ("sim_node", "rgbd_sync_node", "policy_node", "pd_tracker_node"), 0)
    assert "node restarts: rgbd_sync_node x1 (exited: signal SIGKILL after " in run.log()
    assert_children_gone(summary)
    logs = run.log() + "".join(p.read_text() for p in (out / "logs").glob("*.log"))
    assert "Traceback" not in logs and "KeyboardInterrupt" not in logs, logs[-6000:]
