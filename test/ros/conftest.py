"""ROS test plumbing: isolated discovery, node processes stopped by PID, waiting on conditions."""

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# Before rclpy is imported: keep DDS on this machine and give the run its own
# domain and log dir (.ci/run sets them; these defaults cover a bare `pytest`).
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("ROS_DOMAIN_ID", str(10 + os.getpid() % 90))
os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="dpr-ros-log-"))

import rclpy  # noqa: E402
from rcl_interfaces.srv import GetParameters  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import parameter_value_to_python  # noqa: E402

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
        """Everything the node wrote so far (also after ``stop``)."""
        if not self._log.closed:
            self._log.flush()
        with open(self.log_path) as fh:
            return fh.read()

    def stop(self, timeout_s: float = 10.0) -> int:
        code = stop_process(self.proc, timeout_s)
        self._log.close()
        return code


@pytest.fixture
def cpu_burners():
    """Two CPU-burning processes per core next to the test, as a busy robot computer has;
    stopped by PID."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(2 * (os.cpu_count() or 1))]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


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
        match; ros2/rmw_fastrtps#390 and ros2/rmw_fastrtps#467), though
        ``service_is_ready()`` already holds on the client side. Seen once in a CI run
        on two busy cores.
        """
        self.spin_until(client.service_is_ready, 30.0, f"service {client.srv_name}")
        for _ in range(attempts):
            future = client.call_async(request)
            if self.wait_for(future.done, attempt_timeout_s):
                return future.result()
            client.remove_pending_request(future)
        raise AssertionError(f"no {what} from {client.srv_name} to {attempts} requests "
                             f"({attempt_timeout_s} s each)")

    def parameters(self, node: str, names: list[str]) -> dict:
        """``node``'s parameters ``names`` as Python values (its get_parameters service)."""
        client = self.node.create_client(GetParameters, f"{node}/get_parameters")
        try:
            response = self.call_idempotent(client, GetParameters.Request(names=names),
                                            what=f"{node}'s parameters")
        finally:
            self.node.destroy_client(client)
        return {n: parameter_value_to_python(v)
                for n, v in zip(names, response.values, strict=True)}

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


#: The upstream `ros2` CLI, launch and launch_ros: scripts/setup.sh installs them from
#: ../shared/ros2-tools where that folder exists; a ROS 2 install also provides them.
ROS2_TOOLS = (importlib.util.find_spec("launch_ros") is not None
              and shutil.which("ros2", path=f"{Path(sys.executable).parent}{os.pathsep}"
                                            f"{os.environ.get('PATH', '')}") is not None)
requires_ros2_tools = pytest.mark.skipif(
    not ROS2_TOOLS, reason="the ros2 CLI, launch and launch_ros are not installed (PyPI has "
    "none): scripts/setup.sh installs them from ../shared/ros2-tools where that folder "
    "exists; a ROS 2 install provides them too")


def session_processes(sid: int) -> list[int]:
    """PIDs of the live processes in session ``sid`` (Linux /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields[3]: session id
            pids.append(int(entry))
    return pids


class Ros2Command:
    """A `ros2 ...` command run as in a terminal: its own session, SIGINT as Ctrl-C.

    `ros2 launch` stops its nodes only on SIGINT, and a background process of a
    non-interactive shell starts with SIGINT ignored: the handler is restored here.
    """

    def __init__(self, args: list[str], env: dict, log_path: Path):
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in interrupt()
        self.proc = subprocess.Popen(
            args, env=env, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def wait_for(self, predicate, timeout_s: float, what: str) -> None:
        """Poll ``predicate(log)`` until true; fails with the log on timeout or early exit."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self.log()):
            if self.proc.poll() is not None and not predicate(self.log()):
                raise AssertionError(f"{self.args[:3]} exited ({self.proc.returncode}) before "
                                     f"{what}:\n{self.log()[-6000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s} s waiting for {what}:\n"
                                     f"{self.log()[-6000:]}")
            time.sleep(0.2)  # ok-sleep: poll interval of a deadline-bounded wait on the log

    def wait_exit(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.args[:3]} still running after {timeout_s} s:\n"
                                 f"{self.log()[-6000:]}") from None

    def interrupt(self, timeout_s: float = 30.0, group: bool = False) -> list[int]:
        """SIGINT to the command (``group``: to its whole process group, as Ctrl-C in a
        terminal, which `ros2 run` relies on), wait; returns the PIDs of its session still
        alive afterwards (killed here, so nothing outlives the test)."""
        sid = self.proc.pid
        if self.proc.poll() is None:
            if group:
                os.killpg(sid, signal.SIGINT)
            else:
                self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        deadline = time.monotonic() + 5.0
        while session_processes(sid) and time.monotonic() < deadline:
            time.sleep(0.1)  # ok-sleep: poll interval while the session's processes exit
        left = session_processes(sid)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._log.close()
        return left


@pytest.fixture
def ros2_command(tmp_path):
    """Start `ros2 ...` commands (Ros2Command); any still running are interrupted at the end."""
    started = []

    def start(args: list[str], env: dict, name: str) -> Ros2Command:
        command = Ros2Command(args, env, tmp_path / f"{name}.log")
        started.append(command)
        return command

    yield start
    for command in started:
        if not command._log.closed:
            command.interrupt()


@pytest.fixture
def ros2_env(colcon_install):
    """The test's ROS environment after `source install/local_setup.bash` of the colcon build."""
    if not ROS2_TOOLS:
        pytest.skip(requires_ros2_tools.kwargs["reason"])
    return colcon_install.env()


@pytest.fixture(scope="session")
def readme_ros2_command():
    """Finds a `ros2 ...` line of README.md's "ROS 2 users" section by its start and a
    part of it: the command verbatim, its comment cut."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## ROS 2 users", 1)[1].split("\n## ", 1)[0]
    commands = [line.split("  #")[0].strip() for line in section.splitlines()
                if line.startswith("ros2 ")]

    def find(start: str, contains: str) -> str:
        found = [c for c in commands if c.startswith(start) and contains in c]
        assert found, f"README.md's ROS 2 section lost its '{start} ... {contains}' command"
        return found[0]
    return find


@pytest.fixture(scope="session")
def readme_instruction(readme_ros2_command) -> str:
    """The instruction command of README.md's "ROS 2 users" section, verbatim."""
    return readme_ros2_command("ros2 topic pub --once", " /instruction ")
