"""Node processes we started: stopping them (SIGTERM by PID, SIGKILL only after a timeout),
saying how one ended, and when a dead one is started again.

The restart rule is shared by ``dpr bringup`` and ``launch/grasp.launch.py``: only
``RESTARTED_NODES`` come back. While one of them is down no chunk is computed and
``pd_tracker_node`` brakes and holds the arm (``chunk_timeout_s``), which is the safe
state to wait in. The tracker and the simulation are not restarted: the tracker is the
arm's last safety layer, and a silent new tracker or a new world in the middle of an
episode would hide the fault; their exit ends the run.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess

STOP_TIMEOUT_S = 10.0
#: The nodes started again when they die.
RESTARTED_NODES = ("rgbd_sync_node", "policy_node")


def wait_or_kill(proc: subprocess.Popen, timeout_s: float = STOP_TIMEOUT_S) -> int:
    """Wait for ``proc``; kill it if it has not exited after ``timeout_s``. Returns its code."""
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def stop_process(proc: subprocess.Popen, timeout_s: float = STOP_TIMEOUT_S) -> int:
    """SIGTERM (nodes shut down cleanly on it), then ``wait_or_kill``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return wait_or_kill(proc, timeout_s)


def describe_exit(returncode: int) -> str:
    """``status 1``, or ``signal SIGKILL`` for a process a signal ended (a negative code)."""
    if returncode >= 0:
        return f"status {returncode}"
    try:
        return f"signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"signal {-returncode}"


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """When a dead node starts again: ``delay_s`` after its exit, times ``backoff`` for each
    further restart in a row, at most ``max_in_a_row`` in a row. A node that ran
    ``stable_s`` before it died starts a new row, so a crash now and then is always
    recovered while one that dies at start-up ends the run after a few seconds."""

    max_in_a_row: int = 3
    delay_s: float = 1.0
    backoff: float = 2.0
    stable_s: float = 60.0


class RestartCount:
    """One node's restarts under a ``RestartPolicy``."""

    def __init__(self, name: str, policy: RestartPolicy):
        self.name = name
        self.policy = policy
        self.total = 0
        self.in_a_row = 0

    def after_exit(self, returncode: int, ran_s: float) -> tuple[float | None, str]:
        """The process exited after running ``ran_s``: seconds until it is started again
        (counted as a restart), or None when it is not; and the line that says so."""
        ended = f"{self.name} exited ({describe_exit(returncode)}) after {ran_s:.1f} s"
        if self.policy.max_in_a_row == 0:
            return None, f"{ended}: restarts are off, so the run ends"
        if ran_s >= self.policy.stable_s:
            self.in_a_row = 0
        if self.in_a_row >= self.policy.max_in_a_row:
            return None, (f"{ended}: not restarted again after {self.in_a_row} restarts in a "
                          f"row, none lasting {self.policy.stable_s:.0f} s, so the run ends")
        self.in_a_row += 1
        self.total += 1
        delay_s = self.policy.delay_s * self.policy.backoff ** (self.in_a_row - 1)
        return delay_s, (f"{ended}: restarting it in {delay_s:.1f} s (restart {self.total}; "
                         f"{self.in_a_row} in a row of at most {self.policy.max_in_a_row})")


def not_restarted(name: str, returncode: int, ran_s: float) -> str:
    """The line for the exit of a node that is never restarted."""
    return (f"{name} exited ({describe_exit(returncode)}) after {ran_s:.1f} s; it is not "
            "restarted, so the run ends")
