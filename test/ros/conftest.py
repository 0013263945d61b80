"""ROS test plumbing: isolated discovery, node processes stopped by PID, waiting on conditions."""

import os
import subprocess
import sys
import tempfile
import time

import pytest

# Before rclpy is imported: keep DDS on this machine and give the run its own
# domain and log dir (.ci/run sets them; these defaults cover a bare `pytest`).
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("ROS_DOMAIN_ID", str(10 + os.getpid() % 90))
os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="dpr-ros-log-"))

import rclpy  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402

from diffusion_policy_ros.ros.processes import stop_process  # noqa: E402


class NodeProcess:
    """A node started as its own process; stopped with SIGTERM by PID."""

    def __init__(self, module: str, ros_args: list[str], log_path: str):
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--ros-args", *ros_args],
            stdout=self._log, stderr=subprocess.STDOUT, env=os.environ.copy())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        self._log.flush()
        with open(self.log_path) as fh:
            return fh.read()

    def stop(self, timeout_s: float = 10.0) -> int:
        code = stop_process(self.proc, timeout_s)
        self._log.close()
        return code


@pytest.fixture
def start_node(tmp_path):
    started = []

    def start(module: str, ros_args: list[str]) -> NodeProcess:
        proc = NodeProcess(module, ros_args, str(tmp_path / f"{module.rsplit('.', 1)[-1]}.log"))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


class RosHarness:
    """An rclpy context + node in the test process, and deadline-based waiting."""

    def __init__(self):
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("test_harness", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def wait_for(self, predicate, timeout_s: float) -> bool:
        """Spin until ``predicate()`` or the deadline; returns the predicate's last value."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                return False
            self.executor.spin_once(timeout_sec=0.02)
        return True

    def spin_until(self, predicate, timeout_s: float, what="condition") -> None:
        """Like ``wait_for`` but fails; ``what`` (a string or a callable giving one) explains."""
        if not self.wait_for(predicate, timeout_s):
            text = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s} s waiting for {text}")

    def call_idempotent(self, client, request, attempt_timeout_s: float = 5.0,
                        attempts: int = 3, what: str = "response"):
        """Call a service whose request may safely be repeated; re-send if unanswered.

        A Fast DDS service that has not yet matched the client's response reader
        when it answers drops the response (rmw_fastrtps waits only briefly for the
        match; ros2/rmw_fastrtps#390, #467), though ``service_is_ready()`` already
        holds on the client side. Seen once in a CI run on two busy cores.
        """
        self.spin_until(client.service_is_ready, 30.0, f"service {client.srv_name}")
        for _ in range(attempts):
            future = client.call_async(request)
            if self.wait_for(future.done, attempt_timeout_s):
                return future.result()
            client.remove_pending_request(future)
        raise AssertionError(f"no {what} from {client.srv_name} to {attempts} requests "
                             f"({attempt_timeout_s} s each)")

    def spin_for(self, duration_s: float) -> None:
        """Process callbacks for a while (a paced publisher loop, not a blind sleep)."""
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=max(0.0, min(0.01, end - time.monotonic())))

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


@pytest.fixture
def ros():
    harness = RosHarness()
    yield harness
    harness.close()
