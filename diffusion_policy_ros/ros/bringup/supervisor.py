"""The node processes of a bring-up: started together, restarted by the rule of
``ros.processes`` (``RESTARTED_NODES``, ``RestartPolicy``), stopped by PID.

Separate processes, not one process with a ``MultiThreadedExecutor`` (the
contract's wording), because rclpy's multi-threaded executor is a Python dispatch
loop that competes for the GIL, and nodes composed into one interpreter share one
GIL whatever the executor: the 500 Hz tracker, the 30 Hz renderer and the policy
would stall each other (measurements in docs/explanation/benchmarks.md, "Measurements behind
the code's design"). The cost is one interpreter's memory per node and DDS
discovery at start-up.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from diffusion_policy_ros.ros.bringup.graph import NodeSpec
from diffusion_policy_ros.ros.processes import (
    RESTARTED_NODES,
    RestartCount,
    RestartPolicy,
    describe_exit,
    not_restarted,
    wait_or_kill,
)


def _death_signal() -> Callable[[], object] | None:
    """preexec_fn: the child gets SIGTERM when this process dies (Linux PR_SET_PDEATHSIG)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not after fork
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)


class NodeProcesses:
    """One process per node. Every child gets ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``
    unless the variable is set, its output in ``log_dir/<node>.log`` (or this process's
    terminal), SIGTERM if this process dies without cleaning up (Linux), and a process
    group of its own: a terminal's Ctrl-C reaches this process only, which stops the
    nodes in order (``stop``) instead of all at once.

    ``supervise`` (called between spins) restarts a dead node of ``restarted`` under
    ``policy`` and says when the run must end instead; ``restarts`` and ``exits`` tell
    the summary what happened."""

    def __init__(self, specs: list[NodeSpec], log_dir: Path | None,
                 policy: RestartPolicy | None = None,
                 restarted: tuple[str, ...] = RESTARTED_NODES):
        self.specs = {spec.name: spec for spec in specs}
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.counts = {name: RestartCount(name, policy or RestartPolicy())
                       for name in restarted if name in self.specs}
        self.exits: dict[str, list[str]] = {name: [] for name in self.specs}
        self._started_s: dict[str, float] = {}
        self._due_s: dict[str, float] = {}  # restarts waiting for their time
        self._final = ""
        self._logs: dict[str, TextIO] = {}
        self._env: dict[str, str] | None = None
        self._preexec: Callable[[], object] | None = None

    def start(self) -> None:
        """Start every node; call before ``rclpy.init`` so no thread exists when they fork."""
        self._env = os.environ.copy()
        self._env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self._preexec = _death_signal() if sys.platform.startswith("linux") else None
        for name in self.specs:
            self._spawn(name)

    def _spawn(self, name: str) -> None:
        spec = self.specs[name]
        out = None
        if self.log_dir is not None:
            out = self._logs.get(name)
            if out is None:
                out = open(self.log_dir / f"{name}.log", "w")  # noqa: SIM115 - closed in stop
                self._logs[name] = out
            else:
                out.write(f"--- restarted ({self.exits[name][-1]}) ---\n")
                out.flush()
        self.procs[name] = subprocess.Popen(
            spec.command(), env=self._env, stdout=out, stderr=subprocess.STDOUT if out else None,
            stdin=subprocess.DEVNULL, preexec_fn=self._preexec, process_group=0)
        self._started_s[name] = time.monotonic()
        print(f"started {name} (pid {self.procs[name].pid})", flush=True)

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}

    def exited(self) -> dict[str, int]:
        """The nodes whose (latest) process has exited, with its return code."""
        return {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}

    def restarts(self) -> dict[str, int]:
        return {name: count.total for name, count in self.counts.items()}

    def supervise(self) -> str:
        """Start again the nodes whose restart is due, schedule one for each node of
        ``restarted`` that died; '' while the graph runs, else why the run ends (also
        after a later call)."""
        if self._final:
            return self._final
        now = time.monotonic()
        for name, proc in self.procs.items():
            if name in self._due_s:
                if now >= self._due_s[name]:
                    del self._due_s[name]
                    self._spawn(name)
                continue
            code = proc.poll()
            if code is None:
                continue
            ran_s = now - self._started_s[name]
            self.exits[name].append(f"{describe_exit(code)} after {ran_s:.1f} s")
            count = self.counts.get(name)
            if count is None:
                self._final = not_restarted(name, code, ran_s)
            else:
                delay_s, line = count.after_exit(code, ran_s)
                if delay_s is None:
                    self._final = line
                else:
                    self._due_s[name] = now + delay_s
                    print(line, flush=True)
            if self._final:
                return self._final
        return ""

    def stop(self) -> dict[str, int]:
        """SIGTERM by PID (the policy first, so the tracker holds), SIGKILL after a timeout;
        restarts still waiting are dropped."""
        self._due_s.clear()
        order = sorted(self.procs, key=lambda name: name != "policy_node")
        for i, name in enumerate(order):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            if i == 0:
                wait_or_kill(proc)
        for name in order[1:]:
            wait_or_kill(self.procs[name])
        for fh in self._logs.values():
            fh.close()
        return {name: p.returncode for name, p in self.procs.items()}
