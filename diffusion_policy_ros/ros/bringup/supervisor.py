"""The node processes of a bring-up: started together, stopped by PID.

Separate processes, not one process with a ``MultiThreadedExecutor`` (the
contract's wording), because rclpy's multi-threaded executor is a Python dispatch
loop that competes for the GIL, and nodes composed into one interpreter share one
GIL whatever the executor: the 500 Hz tracker, the 30 Hz renderer and the policy
would stall each other (measurements in docs/benchmarks.md, "Measurements behind
the code's design"). The cost is one interpreter's memory per node and DDS
discovery at start-up.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

from diffusion_policy_ros.ros.bringup.graph import NodeSpec
from diffusion_policy_ros.ros.processes import wait_or_kill


def _death_signal():
    """preexec_fn: the child gets SIGTERM when this process dies (Linux PR_SET_PDEATHSIG)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not after fork
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)


class NodeProcesses:
    """One process per node. Every child gets ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``
    unless the variable is set, its output in ``log_dir/<node>.log`` (or this process's
    terminal), and SIGTERM if this process dies without cleaning up (Linux)."""

    def __init__(self, specs: list[NodeSpec], log_dir: Path | None):
        self.specs = specs
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs = []

    def start(self) -> None:
        """Start every node; call before ``rclpy.init`` so no thread exists when they fork."""
        env = os.environ.copy()
        env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        preexec = _death_signal() if sys.platform.startswith("linux") else None
        for spec in self.specs:
            out = None
            if self.log_dir is not None:
                out = open(self.log_dir / f"{spec.name}.log", "w")  # noqa: SIM115 - closed in stop
                self._logs.append(out)
            self.procs[spec.name] = subprocess.Popen(
                spec.command(), env=env, stdout=out, stderr=subprocess.STDOUT if out else None,
                stdin=subprocess.DEVNULL, preexec_fn=preexec)
            print(f"started {spec.name} (pid {self.procs[spec.name].pid})", flush=True)

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}

    def exited(self) -> dict[str, int]:
        return {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}

    def exit_reason(self) -> str:
        """'' while all run, else which exited with which status."""
        exited = self.exited()
        return "" if not exited else "node process exited: " + ", ".join(
            f"{name} (status {rc})" for name, rc in exited.items())

    def stop(self) -> dict[str, int]:
        """SIGTERM by PID (the policy first, so the tracker holds), SIGKILL after a timeout."""
        order = sorted(self.procs, key=lambda name: name != "policy_node")
        for i, name in enumerate(order):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            if i == 0:
                wait_or_kill(proc)
        for name in order[1:]:
            wait_or_kill(self.procs[name])
        for fh in self._logs:
            fh.close()
        return {name: p.returncode for name, p in self.procs.items()}
