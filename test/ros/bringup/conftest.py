"""What the bring-up tests share: ``dpr bringup`` with the tiny policy, a run in the
background that never outlives its test, and the check that no node outlives the run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _alive(pid: int, module: str) -> bool:
    """``pid`` still runs ``module`` (a reused PID runs something else)."""
    try:
        return module.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.fixture
def bringup_env() -> dict:
    env = os.environ.copy()
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


@pytest.fixture
def tiny_bringup_command(tiny_checkpoint):
    """``command(out, *extra)``: dpr bringup with the tiny policy, 2 steps, on the CPU."""
    def command(out, *extra) -> list[str]:
        return [sys.executable, "-m", "diffusion_policy_ros.cli", "bringup",
                "--checkpoint", str(tiny_checkpoint), "--out", str(out), "--device", "cpu",
                "--num-inference-steps", "2", *extra]
    return command


@pytest.fixture
def background_bringup(tmp_path, bringup_env):
    """``start(cmd)``: the command in the background, its output in ``tmp_path/stdout.txt``;
    still running when the test ends, it is killed by PID."""
    procs = []

    def start(cmd: list[str]) -> subprocess.Popen:
        with open(tmp_path / "stdout.txt", "w") as fh:
            procs.append(subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                          env=bringup_env))
        return procs[-1]

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def assert_children_gone():
    """``check(summary)``: every node process the run started has exited."""
    def check(summary: dict) -> None:
        assert set(summary["processes"]) >= {"rgbd_sync_node", "policy_node",
                                              "pd_tracker_node"}
        for name, child in summary["processes"].items():
            assert not _alive(child["pid"], child["module"]), \
                f"{name} (pid {child['pid']}) still runs"
            assert child["exit_status"] is not None
    return check
