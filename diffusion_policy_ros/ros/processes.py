"""Stopping node processes we started: SIGTERM by PID, SIGKILL only after a timeout."""

from __future__ import annotations

import signal
import subprocess

STOP_TIMEOUT_S = 10.0


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
