"""When a dead node is started again (``ros.processes``), as ``dpr bringup``'s supervisor
and ``grasp.launch.py``'s exit watch apply it; real short-lived processes, no ROS graph."""

import importlib.util
import signal
import sys
import time
from types import SimpleNamespace

import pytest

from diffusion_policy_ros.ros.bringup.graph import NodeSpec
from diffusion_policy_ros.ros.bringup.supervisor import NodeProcesses
from diffusion_policy_ros.ros.processes import RestartCount, RestartPolicy, describe_exit


def test_a_node_is_restarted_with_backoff_until_a_row_of_quick_deaths_ends_it():
    count = RestartCount("policy_node", RestartPolicy(max_in_a_row=3, delay_s=1.0, backoff=2.0,
                                                      stable_s=60.0))
    assert [count.after_exit(1, 2.0)[0] for _ in range(3)] == [1.0, 2.0, 4.0]
    delay_s, line = count.after_exit(1, 2.0)
    assert delay_s is None and count.total == 3
    assert line == ("policy_node exited (status 1) after 2.0 s: not restarted again after 3 "
                    "restarts in a row, none lasting 60 s, so the run ends")
    # A node that ran long enough starts a new row: an occasional crash is always recovered.
    count = RestartCount("rgbd_sync_node", RestartPolicy(max_in_a_row=1))
    for _ in range(3):
        delay_s, line = count.after_exit(-9, 120.0)
        assert delay_s == 1.0
    assert line == ("rgbd_sync_node exited (signal SIGKILL) after 120.0 s: restarting it in "
                    "1.0 s (restart 3; 1 in a row of at most 1)")
    assert RestartCount("x", RestartPolicy(max_in_a_row=0)).after_exit(0, 99.0)[0] is None
    assert describe_exit(2) == "status 2" and describe_exit(-2) == "signal SIGINT"


class _Script(NodeSpec):
    """A stand-in node: a Python one-liner."""

    def __init__(self, name: str, code: str):
        super().__init__(name, "stand-in", [])
        self.code = code

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.code]


def _supervise_until(processes: NodeProcesses, predicate, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reason = processes.supervise()
        if reason or predicate():
            return reason
        time.sleep(0.02)  # ok-sleep: poll interval of a deadline-bounded supervision loop
    raise AssertionError("timed out supervising")


def test_the_supervisor_restarts_a_killed_node_and_ends_the_run_for_the_others(tmp_path, capsys):
    sleeper = "import time; time.sleep(60)"  # ok-sleep: a stand-in node that runs until killed
    processes = NodeProcesses(
        [_Script("rgbd_sync_node", sleeper), _Script("policy_node", "raise SystemExit(3)"),
         _Script("pd_tracker_node", sleeper)], tmp_path / "logs",
        RestartPolicy(max_in_a_row=2, delay_s=0.05))
    processes.start()
    try:
        first = processes.pids()["rgbd_sync_node"]
        processes.procs["rgbd_sync_node"].send_signal(signal.SIGKILL)
        # The policy dies at start-up each time: two restarts, then the run ends.
        reason = _supervise_until(processes, lambda: False)
        assert reason.startswith("policy_node exited (status 3) after ")
        assert reason.endswith("not restarted again after 2 restarts in a row, none lasting "
                               "60 s, so the run ends")
        assert processes.supervise() == reason  # said again until the run has stopped
        assert processes.pids()["rgbd_sync_node"] != first
        assert processes.restarts() == {"rgbd_sync_node": 1, "policy_node": 2}
        assert processes.exits["rgbd_sync_node"][0].startswith("signal SIGKILL after ")
        assert len(processes.exits["policy_node"]) == 3
    finally:
        codes = processes.stop()
    assert codes["rgbd_sync_node"] == codes["pd_tracker_node"] == -signal.SIGTERM
    out = capsys.readouterr().out
    assert "rgbd_sync_node exited (signal SIGKILL) after " in out
    assert "restarting it in 0.1 s (restart 2; 2 in a row of at most 2)" in out
    log = (tmp_path / "logs" / "rgbd_sync_node.log").read_text()
    assert "--- restarted (signal SIGKILL after " in log
    # The tracker is never restarted: its exit ends the run at once.
    processes = NodeProcesses([_Script("pd_tracker_node", "raise SystemExit(0)")], None)
    processes.start()
    reason = _supervise_until(processes, lambda: False)
    processes.stop()
    assert reason.startswith("pd_tracker_node exited (status 0) after ")
    assert reason.endswith("it is not restarted, so the run ends")


# launch_ros, not launch: the repository's launch/ folder passes for a package "launch".
@pytest.mark.skipif(importlib.util.find_spec("launch_ros") is None,
                    reason="launch is not installed (PyPI has none): scripts/setup.sh installs "
                    "it from ../shared/ros2-tools where that folder exists")
def test_the_launch_exit_watch_respawns_the_sync_and_policy_nodes_only():
    from diffusion_policy_ros.launch_support import ExitWatch, NodeExitError

    running = SimpleNamespace(is_shutdown=False)
    policy = RestartPolicy(max_in_a_row=1, backoff=1.0)
    sync = ExitWatch("rgbd_sync_node", policy)
    assert sync.node_arguments() == {"respawn": True, "respawn_delay": 1.0}
    assert sync._exited(SimpleNamespace(returncode=-9), running) is None  # respawned
    with pytest.raises(NodeExitError, match="not restarted again after 1 restarts in a row"):
        sync._exited(SimpleNamespace(returncode=-9), running)  # out of restarts: launch ends
    tracker = ExitWatch("pd_tracker_node", policy)
    assert tracker.node_arguments() == {}
    with pytest.raises(NodeExitError, match=r"pd_tracker_node exited \(status 1\) after "):
        tracker._exited(SimpleNamespace(returncode=1), running)
    # Ctrl-C: the nodes' exits belong to the shutdown and say nothing.
    assert tracker._exited(SimpleNamespace(returncode=0), SimpleNamespace(is_shutdown=True)) \
        is None
