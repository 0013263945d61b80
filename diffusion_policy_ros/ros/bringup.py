"""``dpr bringup``: the whole grasp graph without ``launch``, optionally driven for N episodes.

Starts what ``launch/grasp.launch.py`` starts, with the same parameter files
and the same launch-argument defaults: ``sim_node`` (``--sim``, the default;
``--no-sim`` leaves the camera and arm topics to the real drivers),
``rgbd_sync_node``, ``policy_node`` (``autostart``, ``checkpoint``, ``device``,
``num_inference_steps``) and ``pd_tracker_node``. Each node runs as its own
process, ``python -m diffusion_policy_ros.ros.<node> --ros-args --params-file
config/<node>.yaml -p ...``, exactly as ``ros2 launch`` would start it; every
child gets ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` unless the variable is
set, and is stopped by PID with SIGTERM (SIGKILL after 10 s) when this
command ends, is interrupted (Ctrl-C / SIGTERM), or a child exits on its own.
On Linux the children also get SIGTERM if this process dies without cleaning up.

Deviation from the contract (ARCHITECTURE.md: "composes the same nodes ... in
one process (a multi-threaded executor)"), measured on the 2-core machine this
suite targets: rclpy's ``MultiThreadedExecutor`` is a Python dispatch loop
that competes for the GIL and busy-waits on busy callback groups.
``policy_node`` spun in it fell far short of its chunk rate at several times
the CPU it needs with its own inference thread under a single-threaded
executor, and the sync demo under a ``MultiThreadedExecutor`` delivered only a
small share of its frames (figures in docs/benchmarks.md, "Measurements behind
the code's design"). And nodes composed into one Python process share
one GIL whatever the executor: the 500 Hz tracker, the 30 Hz renderer and the
policy would stall each other. Separate processes (what ``ros2 launch`` does)
keep each node's measured rate; the cost is one interpreter's memory per node
and the DDS discovery time at start-up.

Without ``--episodes`` the graph runs until Ctrl-C / SIGTERM, printing a
status line every 10 s. With ``--episodes N`` (simulation only) this process
waits until chunks flow, then for each episode calls ``/sim_node/reset``
(std_srvs/Trigger), publishes ``--instruction`` if given, and waits for the
episode's end on ``sim/episode`` (success / wrong_object / timeout). sim_node
runs with ``auto_reset:=false`` then, so only these resets start episodes.
It prints success and wrong-object rates, chunk latency (receive time of
``policy/action_chunk`` minus its header stamp, i.e. observation stamp to
chunk arrival, plus ``policy_node``'s own predict time from ``/diagnostics``)
and tracker jitter (``pd_tracker_node``'s ``period_error_ms`` p50/p99 from
``/diagnostics``). ``--out DIR`` writes ``DIR/bringup_summary.json`` (per-episode
outcomes and the figures), the node logs to ``DIR/logs/`` and, with
``--episodes``, per episode ``episode_<seed>.gif`` (camera view with the
predicted end-effector path) and ``episode_<seed>.png`` (joint references vs
measured, chunk arrivals and latency; see ``ros/episode_recorder.py``).

Seeds: sim_node starts an episode with its ``seed`` parameter as soon as it
runs, while the policy is still loading; that start-up episode is not
counted. ``--seed S`` (S >= 1) therefore sets ``seed:=S-1``, so the measured
episodes use seeds S, S+1, ... like ``dpr eval --seed S``; without ``--seed``
sim.yaml's seed (0) applies and the measured episodes use 1..N.

``--instruction TEXT`` replaces the sim's instruction: sim_node then runs
with ``publish_instruction:=false`` (two latched publishers on ``instruction``
would race after each reset) and this process publishes TEXT on
``instruction`` (reliable, transient local) at start-up and after each reset.
The sim scores the object TEXT names (``no_target``, which never ends an
episode, when it names none). Without ``--instruction`` the sim instructs itself;
``--sim-param publish_instruction:=false`` makes it wait for a person's
instruction instead, as ``grasp.launch.py`` does by default.

``--switch-after S`` (with ``--episodes``) changes the instruction mid-episode
through the nodes, as ``dpr eval --instructions switch`` does in process: after
each reset this process publishes an instruction for another object (the same
one ``dpr eval`` picks for the seed) and, S seconds of sim time later, the
episode's own (the seed's task, ``sim.runtime.seed_task``; sim_node again with
``publish_instruction:=false``). The sim follows both, so success means the
policy dropped the first target for the new one and lifting the first-named
object after the switch is a wrong object.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from diffusion_policy_ros.config import CONFIG_DIR, SHIPPED_CHECKPOINT
from diffusion_policy_ros.ros.processes import wait_or_kill

OUTCOMES = ("success", "wrong_object", "timeout")
STATUS_PERIOD_S = 10.0
_OVERRIDE = re.compile(r"^[A-Za-z_][\w.]*:=.*$", re.DOTALL)


class BringupError(Exception):
    """Bad options (exit status 2)."""


@dataclasses.dataclass
class NodeSpec:
    name: str  # node name (also its /diagnostics prefix and log file name)
    module: str  # a module of this package, or "PACKAGE EXECUTABLE" for `ros2 run`
    ros_args: list[str]
    arguments: list[str] = dataclasses.field(default_factory=list)  # before --ros-args

    @property
    def ours(self) -> bool:
        """One of this package's nodes (reports on /diagnostics)."""
        return self.module.startswith("diffusion_policy_ros.")

    def command(self) -> list[str]:
        start = [sys.executable, "-m", self.module] if self.ours \
            else ["ros2", "run", *self.module.split()]
        return [*start, *self.arguments, "--ros-args", *self.ros_args]


@dataclasses.dataclass
class Options:
    sim: bool = True
    episodes: int | None = None
    instruction: str | None = None
    switch_after_s: float | None = None
    checkpoint: str | None = None
    seed: int | None = None
    out: str | None = None
    device: str = "auto"
    num_inference_steps: int = 0
    ready_timeout_s: float = 180.0
    namespace: str = ""
    use_sim_time: bool = False
    rviz: bool = False
    sim_params: list[str] = dataclasses.field(default_factory=list)
    sync_params: list[str] = dataclasses.field(default_factory=list)
    policy_params: list[str] = dataclasses.field(default_factory=list)
    tracker_params: list[str] = dataclasses.field(default_factory=list)


# -- pure helpers (unit-tested without ROS) ---------------------------------------------------

def check_override(text: str) -> str:
    """``KEY:=VALUE`` as ``ros2 run ... -p`` takes it, or BringupError."""
    if not _OVERRIDE.match(text):
        raise BringupError(f"parameter override '{text}' is not KEY:=VALUE "
                           "(e.g. time_limit_s:=5.0)")
    return text


def resolve_checkpoint(checkpoint: str | None) -> str:
    """The given checkpoint directory, else the repository's ``checkpoints/grasp_unet_cd``."""
    if checkpoint:
        path = Path(checkpoint)
        if not path.is_dir():
            raise BringupError(f"--checkpoint {checkpoint}: no such directory")
        return str(path.resolve())
    if SHIPPED_CHECKPOINT.is_dir():
        return str(SHIPPED_CHECKPOINT)
    raise BringupError(f"no checkpoint: {SHIPPED_CHECKPOINT} does not exist; pass --checkpoint "
                       "DIR (a checkpoint directory written by dpr train)")


def _overrides(pairs: list[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("-p", check_override(pair))]


def _robot_description_params(directory: Path) -> Path:
    """A params file with the package's URDF for robot_state_publisher (``--rviz``)."""
    import yaml

    from diffusion_policy_ros.description import URDF_PATH

    path = directory / "robot_state_publisher.yaml"
    doc = {"robot_state_publisher": {"ros__parameters": {
        "robot_description": Path(URDF_PATH).read_text(encoding="utf-8")}}}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def node_specs(opts: Options, checkpoint: str, rviz_dir: Path | None = None) -> list[NodeSpec]:
    """The nodes grasp.launch.py starts, in its order, as processes.

    ``--namespace`` remaps every node into it (``-r __ns:=``, as the launch
    file's ``namespace``); ``--use-sim-time`` makes sim_node publish ``/clock``
    and every node follow it. ``--rviz`` adds robot_state_publisher (URDF
    params file written to ``rviz_dir``) and rviz2 with config/grasp.rviz.
    """
    sim_time = str(opts.use_sim_time).lower()
    common = ["-r", f"__ns:=/{opts.namespace.strip('/')}"] if opts.namespace.strip("/") else []
    common += ["-p", f"use_sim_time:={sim_time}"]
    sim_args = ["-p", f"publish_clock:={sim_time}"]
    if opts.episodes is not None:
        sim_args += ["-p", "auto_reset:=false"]  # only this process starts episodes
    if opts.instruction is not None or opts.switch_after_s is not None:
        sim_args += ["-p", "publish_instruction:=false"]
    if opts.seed is not None:
        sim_args += ["-p", f"seed:={opts.seed - 1}"]
    specs = []
    if opts.sim:
        specs.append(NodeSpec("sim_node", "diffusion_policy_ros.ros.sim_node",
                              ["--params-file", str(CONFIG_DIR / "sim.yaml"), *common,
                               *sim_args, *_overrides(opts.sim_params)]))
    specs += [
        NodeSpec("rgbd_sync_node", "diffusion_policy_ros.ros.rgbd_sync_node",
                 ["--params-file", str(CONFIG_DIR / "rgbd_sync.yaml"), *common,
                  *_overrides(opts.sync_params)]),
        NodeSpec("policy_node", "diffusion_policy_ros.ros.policy_node",
                 ["--params-file", str(CONFIG_DIR / "policy_node.yaml"), *common,
                  "-p", f"device:={opts.device}", "-p", f"checkpoint:={checkpoint}",
                  "-p", f"num_inference_steps:={opts.num_inference_steps}",
                  "-p", "autostart:=true", *_overrides(opts.policy_params)]),
        NodeSpec("pd_tracker_node", "diffusion_policy_ros.ros.pd_tracker_node",
                 ["--params-file", str(CONFIG_DIR / "pd_tracker.yaml"), *common,
                  *_overrides(opts.tracker_params)]),
    ]
    if opts.rviz:
        params = _robot_description_params(rviz_dir) if rviz_dir is not None else Path(
            "robot_state_publisher.yaml")
        specs += [
            NodeSpec("robot_state_publisher", "robot_state_publisher robot_state_publisher",
                     ["--params-file", str(params), *common]),
            NodeSpec("rviz2", "rviz2 rviz2", common, ["-d", str(CONFIG_DIR / "grasp.rviz")]),
        ]
    return specs


def validate(opts: Options) -> str:
    """Checks the options; returns the checkpoint directory. Raises BringupError."""
    if opts.episodes is not None:
        if opts.episodes < 1:
            raise BringupError("--episodes must be at least 1")
        if not opts.sim:
            raise BringupError("--episodes needs the simulation (drop --no-sim): episodes are "
                               "reset and scored by sim_node")
    if opts.seed is not None and opts.seed < 1:
        raise BringupError("--seed must be at least 1: sim_node's start-up episode (not "
                           "counted) takes seed S-1")
    if opts.instruction is not None and not opts.instruction.strip():
        raise BringupError("--instruction must not be empty")
    if opts.switch_after_s is not None:
        if opts.episodes is None:
            raise BringupError("--switch-after needs --episodes (it acts on each episode)")
        if opts.instruction is not None:
            raise BringupError("--switch-after and --instruction exclude each other")
        if opts.switch_after_s <= 0.0:
            raise BringupError("--switch-after must be > 0 s")
    if opts.num_inference_steps < 0:
        raise BringupError("--num-inference-steps must be >= 0 (0 = the checkpoint's)")
    for pair in (*opts.sim_params, *opts.sync_params, *opts.policy_params, *opts.tracker_params):
        check_override(pair)
    if opts.namespace and not re.fullmatch(r"/?[A-Za-z][\w/]*", opts.namespace):
        raise BringupError(f"--namespace {opts.namespace!r} is not a ROS namespace (letters, "
                           "digits, _ and /, starting with a letter)")
    if opts.rviz and shutil.which("ros2") is None:
        raise BringupError("--rviz needs a ROS 2 install with rviz2 and robot_state_publisher "
                           "(`ros2 run` is not on PATH; the PyPI wheels do not ship rviz2)")
    return resolve_checkpoint(opts.checkpoint)


def percentiles(values, qs=(50, 99)) -> dict[str, float | None]:
    """{'p50': .., 'p99': .., 'max': .., 'count': n}; None where there are no values."""
    arr = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    out: dict[str, float | None] = {f"p{q}": (round(float(np.percentile(arr, q)), 3)
                                              if arr.size else None) for q in qs}
    out["max"] = round(float(arr.max()), 3) if arr.size else None
    out["count"] = int(arr.size)
    return out


def _float(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def summarize(outcomes: list[dict], latencies_ms: list[float], diagnostics: dict[str, dict],
              tracker_p99_worst: float | None) -> dict:
    """Rates and figures of a run from per-episode outcomes and the last diagnostics."""
    n = len(outcomes)
    counts = {k: sum(o["status"] == k for o in outcomes) for k in OUTCOMES}
    policy = diagnostics.get("policy_node", {})
    tracker = diagnostics.get("pd_tracker_node", {})
    sim = diagnostics.get("sim_node", {})
    return {
        "episodes_completed": n,
        "success_rate": counts["success"] / n if n else None,
        "wrong_object_rate": counts["wrong_object"] / n if n else None,
        "timeout_rate": counts["timeout"] / n if n else None,
        "outcome_counts": counts,
        "chunk_latency_ms": percentiles(latencies_ms),
        "policy_predict_ms": {"p50": _float(policy.get("predict_ms_p50")),
                              "p99": _float(policy.get("predict_ms_p99"))},
        "policy_chunk_rate_hz": _float(policy.get("chunk_rate_hz")),
        "policy_chunks_total": int(policy["chunks_total"]) if "chunks_total" in policy else None,
        "policy_overrun_ticks": (int(policy["overrun_ticks"]) if "overrun_ticks" in policy
                                 else None),
        "tracker_period_error_ms": {"p50": _float(tracker.get("period_error_ms_p50")),
                                    "p99": _float(tracker.get("period_error_ms_p99")),
                                    "max": _float(tracker.get("period_error_ms_max")),
                                    "p99_worst": tracker_p99_worst},
        "tracker_loop_rate_hz": _float(tracker.get("loop_rate_hz")),
        "tracker_tick_source": tracker.get("tick_source"),
        "tracker_safety": {k: int(tracker[k]) for k in ("late_state_ticks", "overspeed_stops",
                                                        "path_aborts", "faults")
                           if k in tracker},
        "sim_lockstep": sim.get("lockstep"),
        "sim_lockstep_wait_ms": {"p50": _float(sim.get("lockstep_wait_ms_p50")),
                                 "p99": _float(sim.get("lockstep_wait_ms_p99"))},
        "sim_real_time_factor": _float(sim.get("real_time_factor")),
    }


def format_summary(summary: dict) -> str:
    def f(x, spec=".1f"):
        return "n/a" if x is None else format(x, spec)

    lat, pred = summary["chunk_latency_ms"], summary["policy_predict_ms"]
    jit = summary["tracker_period_error_ms"]
    lines = []
    n = summary["episodes_completed"]
    if summary.get("episodes_requested") is not None:
        c = summary["outcome_counts"]
        lines.append(f"episodes {n}/{summary['episodes_requested']}: success rate "
                     f"{f(summary['success_rate'], '.2f')} ({c['success']}), wrong-object rate "
                     f"{f(summary['wrong_object_rate'], '.2f')} ({c['wrong_object']}), timeouts "
                     f"{c['timeout']}")
    lines.append(f"chunks received {lat['count']} ({f(summary['policy_chunk_rate_hz'])} /s at "
                 f"the policy); observation stamp -> chunk received p50 {f(lat['p50'])} ms, "
                 f"p99 {f(lat['p99'])} ms; policy predict p50 {f(pred['p50'])} ms, p99 "
                 f"{f(pred['p99'])} ms")
    if summary.get("tracker_tick_source") == "joint_states":
        wait = summary.get("sim_lockstep_wait_ms") or {}
        loop = (f"tracker ticks on joint_states, sim lockstep {summary.get('sim_lockstep')} "
                f"(waits for a command p50 {f(wait.get('p50'), '.3f')} ms, p99 "
                f"{f(wait.get('p99'), '.3f')} ms)")
    else:
        loop = (f"tracker at {f(summary['tracker_loop_rate_hz'])} Hz, period error p50 "
                f"{f(jit['p50'], '.3f')} ms, p99 {f(jit['p99'], '.3f')} ms (worst p99 "
                f"{f(jit['p99_worst'], '.3f')} ms), max {f(jit['max'], '.3f')} ms")
    safety = summary.get("tracker_safety") or {}
    if safety:
        loop += "; tracker " + ", ".join(f"{k} {v}" for k, v in safety.items())
    lines.append(f"{loop}; sim real-time factor {f(summary['sim_real_time_factor'], '.2f')}")
    errors = summary.get("diagnostics_errors") or {}
    lines.append("ERROR on /diagnostics after start-up: " + ("none" if not errors else "; ".join(
        f"{node} x{e['count']} ({' | '.join(e['messages'])})" for node, e in errors.items())))
    return "\n".join(lines)


# -- child processes --------------------------------------------------------------------------

def _death_signal():
    """preexec_fn: the child gets SIGTERM when this process dies (Linux PR_SET_PDEATHSIG)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not after fork
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)


class Children:
    """The node processes, started together and stopped by PID."""

    def __init__(self, specs: list[NodeSpec], log_dir: Path | None):
        self.specs = specs
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs = []

    def start(self) -> None:
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
                stdin=subprocess.DEVNULL,
                preexec_fn=preexec)
            print(f"started {spec.name} (pid {self.procs[spec.name].pid})", flush=True)

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}

    def exited(self) -> dict[str, int]:
        return {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}

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



# -- ROS side ---------------------------------------------------------------------------------

class Stop(Exception):
    """Ctrl-C / SIGTERM, or a child that exited: end the run."""


class Monitor:
    """This process's node: drives episodes and records chunks, episodes and diagnostics."""

    def __init__(self, children: Children | None, stop_requested=lambda: "",
                 record_media: bool = False, namespace: str = "", use_sim_time: bool = False):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.parameter import Parameter
        from rclpy.qos import DurabilityPolicy, QoSProfile
        from std_msgs.msg import String
        from std_srvs.srv import Trigger
        from trajectory_msgs.msg import JointTrajectory

        self.children = children
        self.stop_requested = stop_requested
        self.node = rclpy.create_node(
            "dpr_bringup", namespace=f"/{namespace}" if namespace else "",
            parameter_overrides=[Parameter("use_sim_time", value=use_sim_time)])
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.chunks: list[tuple[float, float]] = []  # (monotonic s, stamp -> received ms)
        self.diagnostics: dict[str, dict[str, str]] = {}
        self.diag_counts: dict[str, int] = {}
        self.diag_messages: dict[str, str] = {}
        self.diag_errors: dict[str, bool] = {}
        #: ERROR statuses per node once the graph is up (start-up faults such as the
        #: tracker's "no joint_states yet" are expected and not counted), first messages.
        self.errors_after_ready: dict[str, dict] = {}
        self.ready = False
        self.episodes: dict[int, dict] = {}  # episode number -> latest sim/episode report
        self.ended: list[dict] = []  # reports of episodes that ended, in order
        self.tracker_p99: list[tuple[float, float]] = []  # (monotonic s, period_error p99)
        self.node.create_subscription(JointTrajectory, "policy/action_chunk", self._on_chunk,
                                      QoSProfile(depth=10))
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics,
                                      QoSProfile(depth=50))
        self.node.create_subscription(String, "sim/episode", self._on_episode, latched)
        self.instruction_pub = self.node.create_publisher(String, "instruction", latched)
        self.reset_client = self.node.create_client(Trigger, "sim_node/reset")
        self._string, self._trigger = String, Trigger
        self._error_level = DiagnosticStatus.ERROR
        self.recorder = None
        if record_media:
            from diffusion_policy_ros.ros.episode_recorder import EpisodeMediaRecorder

            self.recorder = EpisodeMediaRecorder(self.node)

    # callbacks

    def _on_chunk(self, msg) -> None:
        stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        latency_ms = (self.node.get_clock().now().nanoseconds - stamp_ns) * 1e-6
        self.chunks.append((time.monotonic(), latency_ms))

    def _on_diagnostics(self, msg) -> None:
        for status in msg.status:
            name = status.name.split(":", 1)[0]
            values = {kv.key: kv.value for kv in status.values}
            self.diagnostics[name] = values
            self.diag_messages[name] = status.message
            self.diag_errors[name] = status.level == self._error_level
            if self.ready and status.level == self._error_level:
                entry = self.errors_after_ready.setdefault(name, {"count": 0, "messages": []})
                entry["count"] += 1
                if status.message not in entry["messages"] and len(entry["messages"]) < 5:
                    entry["messages"].append(status.message)
            self.diag_counts[name] = self.diag_counts.get(name, 0) + 1
            if name == "pd_tracker_node":
                p99 = _float(values.get("period_error_ms_p99"))
                if p99 is not None:
                    self.tracker_p99.append((time.monotonic(), p99))

    def _on_episode(self, msg) -> None:
        report = json.loads(msg.data)
        self.episodes[report["episode"]] = report
        if report["status"] in OUTCOMES:
            self.ended.append(report)

    # waiting

    def check(self) -> None:
        reason = self.stop_requested()
        if reason:
            raise Stop(reason)
        if self.children is not None:
            exited = self.children.exited()
            if exited:
                raise Stop("node process exited: " + ", ".join(
                    f"{name} (status {rc})" for name, rc in exited.items()))

    def spin_until(self, predicate, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            self.check()
            if time.monotonic() > deadline:
                return False
            self.executor.spin_once(timeout_sec=0.05)
        return True

    def publish_instruction(self, text: str) -> None:
        self.instruction_pub.publish(self._string(data=text))

    def reset(self, timeout_s: float = 30.0) -> str:
        future = self.reset_client.call_async(self._trigger.Request())
        if not self.spin_until(future.done, timeout_s):
            raise Stop(f"sim_node/reset did not answer within {timeout_s:.0f} s")
        response = future.result()
        if not response.success:
            raise Stop(f"sim_node/reset failed: {response.message}")
        return response.message

    def sim_parameters(self, names: list[str], timeout_s: float = 10.0) -> dict:
        from rcl_interfaces.srv import GetParameters
        from rclpy.parameter import parameter_value_to_python

        client = self.node.create_client(GetParameters, "sim_node/get_parameters")
        try:
            if not self.spin_until(client.service_is_ready, timeout_s):
                return {}
            future = client.call_async(GetParameters.Request(names=names))
            if not self.spin_until(future.done, timeout_s) or future.result() is None:
                return {}
            return {n: parameter_value_to_python(v)
                    for n, v in zip(names, future.result().values, strict=True)}
        finally:
            self.node.destroy_client(client)

    def fresh_diagnostics(self, names: list[str], timeout_s: float = 3.0) -> None:
        """Wait (briefly) for one more /diagnostics message from each of ``names``."""
        start = {n: self.diag_counts.get(n, 0) for n in names}
        self.spin_until(lambda: all(self.diag_counts.get(n, 0) > start[n] for n in names),
                        timeout_s)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()


def _wait_ready(mon: Monitor, nodes: list[str], timeout_s: float, required: bool) -> None:
    """All nodes report on /diagnostics, the policy is active, and action chunks arrive.

    Not ``required`` (run until a signal): a timeout is reported and the graph keeps
    running (the drivers of a real robot may come up later); a failed configure still ends it.
    """
    print("waiting for the nodes (policy: load + warm-up) and the first action chunk ...",
          flush=True)
    t0 = time.monotonic()

    def ready() -> bool:
        policy = mon.diagnostics.get("policy_node", {})
        if policy.get("state") == "unconfigured" and mon.diag_errors.get("policy_node"):
            # autostart configures before the first diagnostics: this is its failure
            raise Stop(f"policy_node could not be configured: {mon.diag_messages['policy_node']}")
        return all(n in mon.diagnostics for n in nodes) and policy.get("state") == "active" \
            and bool(mon.chunks)

    if not mon.spin_until(ready, timeout_s):
        missing = [n for n in nodes if n not in mon.diagnostics]
        policy = mon.diag_messages.get("policy_node", "no diagnostics")
        problem = (f"not ready after {timeout_s:.0f} s: no /diagnostics from "
                   f"{missing or 'none'}; policy_node: {policy}; chunks received: "
                   f"{len(mon.chunks)}")
        if required:
            raise Stop(problem)
        print(f"warning: {problem}; still running", flush=True)
        return
    mon.ready = True
    print(f"ready after {time.monotonic() - t0:.1f} s: chunks flowing", flush=True)


def _run_episodes(mon: Monitor, opts: Options, records: list[dict]) -> None:
    params = mon.sim_parameters(["time_limit_s", "real_time_factor"])
    limit_s = float(params.get("time_limit_s") or 20.0)
    rtf = float(params.get("real_time_factor") or 1.0)
    # Generous: the achieved real-time factor drops when the CPU is shared.
    wall_limit_s = 5.0 * limit_s / rtf + 60.0
    if not mon.spin_until(mon.reset_client.service_is_ready, 30.0):
        raise Stop("service /sim_node/reset not available")
    object_names = _object_names() if opts.switch_after_s is not None else []
    for index in range(opts.episodes):
        known = max(mon.episodes, default=0)
        message = mon.reset()
        if mon.recorder is not None:
            mon.recorder.start()
        match = re.match(r"episode (\d+)", message)
        number = int(match.group(1)) if match else known + 1
        if opts.instruction is not None:
            mon.publish_instruction(opts.instruction)
        start, first_chunk = time.monotonic(), len(mon.chunks)

        def ended(number=number) -> bool:
            report = mon.episodes.get(number)
            return report is not None and report["status"] in OUTCOMES

        first = None
        if opts.switch_after_s is not None:
            first = _switch_instruction(mon, number, object_names, opts.switch_after_s, ended,
                                        wall_limit_s)
        if not mon.spin_until(ended, wall_limit_s):
            raise Stop(f"episode {number} did not end within {wall_limit_s:.0f} s "
                       f"(time_limit_s {limit_s:g})")
        report = mon.episodes[number]
        lat = [ms for _, ms in mon.chunks[first_chunk:]]
        record = {
            "index": index, "episode": number, "seed": report["seed"],
            "status": report["status"], "target": report["target"],
            "instruction": opts.instruction if opts.instruction is not None
            else report["instruction"],
            "sim_instruction": report["instruction"],
            **({"first_instruction": first} if first is not None else {}),
            "wrong_object": report["wrong_object"], "elapsed_s": report["elapsed_s"],
            "wall_s": round(time.monotonic() - start, 3), "chunks": len(lat),
            "chunk_latency_ms": percentiles(lat),
        }
        if mon.recorder is not None:
            record["media"] = mon.recorder.finish(
                Path(opts.out), f"episode_{record['seed']}",
                title=f"seed {record['seed']}: '{record['instruction']}' (target "
                      f"{record['target']}), ROS graph",
                caption=f"'{record['instruction']}': {record['status']}")
        records.append(record)
        told = f"'{record['instruction']}'" if first is None \
            else f"'{first}', then '{record['instruction']}'"
        print(f"episode {index + 1}/{opts.episodes} (seed {record['seed']}, "
              f"{told} -> {record['target']}): {record['status']} after "
              f"{record['elapsed_s']:.2f} s sim, {record['wall_s']:.1f} s wall, "
              f"{record['chunks']} chunks", flush=True)


def _object_names() -> list[str]:
    from diffusion_policy_ros.sim.scene import find_objects, load_model

    return [o.name for o in find_objects(load_model())]


def _give_startup_episode_its_instruction(mon: Monitor, timeout_s: float) -> None:
    """With ``--switch-after`` sim_node publishes no instruction: without this the policy
    would wait for one and no chunk would flow before the first measured episode."""
    from diffusion_policy_ros.sim.runtime import seed_task

    if not mon.spin_until(lambda: bool(mon.episodes), timeout_s):
        raise Stop(f"no sim/episode report from sim_node within {timeout_s:.0f} s")
    seed = int(mon.episodes[max(mon.episodes)]["seed"])
    mon.publish_instruction(seed_task(seed, _object_names()).instruction)


def _switch_instruction(mon: Monitor, number: int, object_names: list[str], after_s: float,
                        ended, wall_limit_s: float) -> str:
    """Publish another object's instruction now and the episode's own ``after_s`` of
    sim time later (unless the episode ended first); returns the first one."""
    from diffusion_policy_ros.sim.runtime import seed_task
    from diffusion_policy_ros.sim.task import wrong_instruction

    if not mon.spin_until(lambda: number in mon.episodes, 30.0):
        raise Stop(f"no sim/episode report for episode {number}")
    seed = int(mon.episodes[number]["seed"])
    own = seed_task(seed, object_names)  # the sim follows the last instruction: not the report's
    first = wrong_instruction(own.target, object_names, seed)
    mon.publish_instruction(first)
    t0_ns = mon.node.get_clock().now().nanoseconds  # sim time with --use-sim-time

    def due() -> bool:
        return ended() or (mon.node.get_clock().now().nanoseconds - t0_ns) * 1e-9 >= after_s

    mon.spin_until(due, wall_limit_s)
    if not ended():
        mon.publish_instruction(own.instruction)
    return first


def _run_forever(mon: Monitor) -> None:
    next_status = time.monotonic() + STATUS_PERIOD_S
    while True:
        mon.spin_until(lambda: False, max(0.0, next_status - time.monotonic()))
        next_status += STATUS_PERIOD_S
        recent = [ms for t, ms in mon.chunks if t > time.monotonic() - STATUS_PERIOD_S]
        tracker = mon.diagnostics.get("pd_tracker_node", {})
        current = mon.episodes.get(max(mon.episodes, default=0), {})
        lat = percentiles(recent)
        print(f"[{time.strftime('%H:%M:%S')}] chunks {len(recent) / STATUS_PERIOD_S:.1f}/s, "
              f"latency p50 {lat['p50']} ms; tracker period error p99 "
              f"{tracker.get('period_error_ms_p99', '?')} ms; episode "
              f"{current.get('episode', '-')} {current.get('status', '-')}", flush=True)


def run(opts: Options) -> int:
    """Start the graph, run it (N episodes or until a signal), stop it; the exit status."""
    try:
        checkpoint = validate(opts)
    except BringupError as exc:
        print(f"dpr bringup: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    out = Path(opts.out) if opts.out else None
    rviz_dir = None
    if opts.rviz:
        rviz_dir = out if out else Path(tempfile.mkdtemp(prefix="dpr-bringup-"))
        rviz_dir.mkdir(parents=True, exist_ok=True)
    specs = node_specs(opts, checkpoint, rviz_dir)
    children = Children(specs, out / "logs" if out else None)

    import rclpy
    from rclpy.signals import SignalHandlerOptions

    signalled: list[str] = []  # set by the handler, acted on by Monitor.check() between spins
    previous = {sig: signal.signal(sig, lambda signum, frame: signalled.append(
        signal.Signals(signum).name)) for sig in (signal.SIGINT, signal.SIGTERM)}
    mon: Monitor | None = None
    records: list[dict] = []
    aborted = ""
    started = time.monotonic()
    try:
        children.start()  # before rclpy.init: no threads yet when the children fork
        rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
        mon = Monitor(children, lambda: signalled[0] if signalled else "",
                      record_media=out is not None and opts.episodes is not None,
                      namespace=opts.namespace.strip("/"), use_sim_time=opts.use_sim_time)
        if opts.instruction is not None:
            mon.publish_instruction(opts.instruction)
        if opts.switch_after_s is not None:
            _give_startup_episode_its_instruction(mon, opts.ready_timeout_s)
        _wait_ready(mon, [s.name for s in specs if s.ours], opts.ready_timeout_s,
                    required=opts.episodes is not None)
        if opts.episodes is None:
            print("running; Ctrl-C or SIGTERM stops all nodes", flush=True)
            _run_forever(mon)
        else:
            _run_episodes(mon, opts, records)
            mon.fresh_diagnostics(["policy_node", "pd_tracker_node"])
    except Stop as exc:
        aborted = str(exc)
    finally:
        exited_early = children.exited()
        return_codes = children.stop()  # a second Ctrl-C meanwhile is recorded, not raised
        snapshot = (dict(diagnostics=mon.diagnostics, chunks=list(mon.chunks),
                         tracker_p99=list(mon.tracker_p99), ended=list(mon.ended),
                         errors=dict(mon.errors_after_ready))
                    if mon is not None else None)
        if mon is not None:
            mon.close()
        rclpy.try_shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    by_signal = aborted in ("SIGINT", "SIGTERM")
    if aborted and not by_signal:
        print(f"dpr bringup: stopped: {aborted}", file=sys.stderr)
    if snapshot is None:
        return 0 if by_signal and opts.episodes is None else 1
    if opts.episodes is None:  # every episode that ended while the graph ran
        records = [{"episode": r["episode"], "seed": r["seed"], "status": r["status"],
                    "target": r["target"], "instruction": r["instruction"],
                    "wrong_object": r["wrong_object"], "elapsed_s": r["elapsed_s"]}
                   for r in snapshot["ended"]]
    p99s = [p for _, p in snapshot["tracker_p99"]]
    summary = {
        "episodes_requested": opts.episodes,
        **summarize(records, [ms for _, ms in snapshot["chunks"]], snapshot["diagnostics"],
                    round(max(p99s), 4) if p99s else None),
        "episodes": records,
        "aborted": aborted or None,
        "wall_s": round(time.monotonic() - started, 1),
        "checkpoint": checkpoint,
        "instruction_override": opts.instruction,
        "sim": opts.sim,
        "processes": {spec.name: {"pid": children.pids()[spec.name], "module": spec.module,
                                  "args": spec.ros_args,
                                  "exit_status": return_codes.get(spec.name),
                                  "exited_early": spec.name in exited_early}
                      for spec in specs},
        "diagnostics_errors": snapshot["errors"],
        "diagnostics": snapshot["diagnostics"],
    }
    print(format_summary(summary), flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        path = out / "bringup_summary.json"
        path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        print(f"summary: {path}", flush=True)
    if opts.episodes is None:
        return 0 if by_signal else 1
    return 0 if not aborted and len(records) == opts.episodes else 1
