"""``dpr bench frozen-subscriber``: does a frozen subscriber hold the sim's publish?

``sim_node`` (wall clock, ``config/sim.yaml``) and ``pd_tracker_node`` run as on a real
arm, next to an unconfigured ``policy_node`` (a ``joint_states`` subscriber). One
process, the policy or (``frozen="rgbd_sync_node"``, then started too) the camera
images' subscriber, is frozen (SIGSTOP) for ``freeze_s`` and resumed (SIGCONT),
``cycles`` times, as a debugger, a Ctrl-Z or a suspended container would. Counted per
block: ``sim_node``'s ``publish_stalls`` and the tracker's ``faults`` (from their
``/diagnostics``), the freezes during which this process saw ``joint_states`` stop for
``gap_stall_s`` or more, and ``sim_node``'s CPU per wall second.

Two configurations, interleaved block by block: ``package`` (the nodes' default,
``config/fastdds_profiles.xml``: control topics' readers on UDP loopback) and
``shm`` (a profiles file without the control topics: Fast DDS's shared memory for
every local reader).
This process's own reader is not frozen and keeps Fast DDS's default.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import QoSProfile
from sensor_msgs.msg import JointState

from diffusion_policy_ros.bench.json_report import write_json
from diffusion_policy_ros.config import CONFIG_DIR
from diffusion_policy_ros.monitoring import process_cpu_s
from diffusion_policy_ros.ros.dds_profiles import PROFILES_ENV, PROFILES_FILE
from diffusion_policy_ros.ros.processes import stop_process

CONFIGS = ("package", "shm")
FROZEN = ("policy_node", "rgbd_sync_node")
#: No reader settings at all (Fast DDS logs an error for a file without any profile).
NO_READER_PROFILES = ('<?xml version="1.0"?>\n<dds xmlns="http://www.eprosima.com"><profiles>'
                      '<data_reader profile_name="/frozen_subscriber_bench/unused"/>'
                      '</profiles></dds>\n')


class _Probe:
    """This process's view: ``joint_states`` arrival times and the latest diagnostics."""

    def __init__(self) -> None:
        self.node = rclpy.create_node("frozen_subscriber_bench")
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.last_state_s = 0.0
        self.longest_gap_s = 0.0
        self.diag: dict[str, dict[str, str]] = {}
        self.node.create_subscription(JointState, "joint_states", self._on_state,
                                      QoSProfile(depth=10))
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag,
                                      QoSProfile(depth=10))

    def _on_state(self, _msg: JointState) -> None:
        now = time.monotonic()
        if self.last_state_s:
            self.longest_gap_s = max(self.longest_gap_s, now - self.last_state_s)
        self.last_state_s = now

    def _on_diag(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            name = status.name.split(":")[0].strip()
            self.diag[name] = {kv.key: kv.value for kv in status.values}

    def spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=min(0.02, max(0.0, end - time.monotonic())))

    def spin_until(self, done, timeout_s: float, what: str) -> None:
        end = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > end:
                raise TimeoutError(f"waited {timeout_s:.0f} s for {what}")
            self.executor.spin_once(timeout_sec=0.05)

    def value(self, node: str, key: str) -> str | None:
        return self.diag.get(node, {}).get(key)

    def count(self, node: str, key: str) -> int:
        value = self.value(node, key)
        assert value is not None, f"{node} reported no {key}"
        return int(value)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()


def _start(module: str, params: list[str], env: dict[str, str], log_dir: Path) -> subprocess.Popen:
    with open(log_dir / f"{module.rsplit('.', 1)[1]}.log", "ab") as log:
        return subprocess.Popen([sys.executable, "-m", module, "--ros-args", *params],
                                env=env, stdout=log, stderr=subprocess.STDOUT)


def _block(probe: _Probe, config: str, frozen_node: str, cycles: int, freeze_s: float,
           gap_s: float, gap_stall_s: float, work_dir: Path) -> dict:
    env = dict(os.environ)
    if config == "package":
        env[PROFILES_ENV] = str(PROFILES_FILE)
    else:
        empty = work_dir / "no_reader_profiles.xml"
        empty.write_text(NO_READER_PROFILES, encoding="utf-8")
        env[PROFILES_ENV] = str(empty)
    nodes = "diffusion_policy_ros.ros."
    procs = {
        "sim_node": _start(nodes + "sim_node", ["--params-file", str(CONFIG_DIR / "sim.yaml"),
                                                "-p", "time_limit_s:=3600.0"], env, work_dir),
        "pd_tracker_node": _start(nodes + "pd_tracker_node",
                                  ["--params-file", str(CONFIG_DIR / "pd_tracker.yaml")],
                                  env, work_dir),
        "policy_node": _start(nodes + "policy_node",
                              ["--params-file", str(CONFIG_DIR / "policy_node.yaml")],
                              env, work_dir),
    }
    if frozen_node == "rgbd_sync_node":
        procs[frozen_node] = _start(nodes + frozen_node,
                                    ["--params-file", str(CONFIG_DIR / "rgbd_sync.yaml")],
                                    env, work_dir)
    frozen = procs[frozen_node]
    try:
        probe.diag.clear()
        probe.spin_until(lambda: probe.value("pd_tracker_node", "mode") == "holding"
                         and probe.value("sim_node", "publish_stalls") is not None
                         and probe.node.count_subscribers("joint_states") >= 3
                         and (frozen_node != "rgbd_sync_node"
                              or probe.value("rgbd_sync_node", "processing_ms_p50") is not None),
                         120.0, "sim_node and a holding tracker, three joint_states readers")
        stalls0 = probe.count("sim_node", "publish_stalls")
        faults0 = probe.count("pd_tracker_node", "faults")
        cpu0, wall0 = process_cpu_s(procs["sim_node"].pid), time.monotonic()
        gaps_s = []
        for _ in range(cycles):
            probe.longest_gap_s = 0.0
            frozen.send_signal(signal.SIGSTOP)
            probe.spin_for(freeze_s)
            frozen.send_signal(signal.SIGCONT)
            probe.spin_for(0.1)
            gaps_s.append(probe.longest_gap_s)
            probe.spin_for(gap_s)
        cpu1 = process_cpu_s(procs["sim_node"].pid)
        assert cpu0 is not None and cpu1 is not None, "no /proc CPU times for sim_node"
        cpu_per_s = (cpu1 - cpu0) / (time.monotonic() - wall0)
        probe.diag.clear()
        probe.spin_until(lambda: "sim_node" in probe.diag and "pd_tracker_node" in probe.diag,
                         10.0, "the reports after the last freeze")
        return {
            "config": config, "frozen": frozen_node, "cycles": cycles, "freeze_s": freeze_s,
            "publish_stalls": probe.count("sim_node", "publish_stalls") - stalls0,
            "tracker_faults": probe.count("pd_tracker_node", "faults") - faults0,
            "freezes_with_states_stopped": sum(g >= gap_stall_s for g in gaps_s),
            "longest_gap_ms": round(max(gaps_s) * 1e3, 1),
            "median_gap_ms": round(statistics.median(gaps_s) * 1e3, 1),
            "sim_cpu_core_s_per_s": round(cpu_per_s, 3),
        }
    except TimeoutError as exc:
        logs = "\n".join(f"--- {name}\n{(work_dir / f'{name}.log').read_text()[-2000:]}"
                         for name in procs)
        raise TimeoutError(f"{exc} ({config})\n{logs}") from None
    finally:
        if frozen.poll() is None:
            frozen.send_signal(signal.SIGCONT)
        for proc in procs.values():
            stop_process(proc)


def format_table(rows: list[dict]) -> str:
    lines = ["| config | frozen | freezes | sim publish stalls | tracker faults | freezes with "
             "joint_states stopped | longest / median gap (ms) | sim_node CPU (core-s/s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['frozen']} | {r['cycles']} x {r['freeze_s']} s | "
                     f"{r['publish_stalls']} | {r['tracker_faults']} | "
                     f"{r['freezes_with_states_stopped']} | {r['longest_gap_ms']} / "
                     f"{r['median_gap_ms']} | {r['sim_cpu_core_s_per_s']} |")
    return "\n".join(lines)


def run(cycles: int = 100, rounds: int = 2, freeze_s: float = 0.3, gap_s: float = 0.7,
        gap_stall_s: float = 0.2, configs: tuple[str, ...] = CONFIGS,
        frozen: str = "policy_node", json_path: str | None = None) -> int:
    """``rounds`` x each configuration, ``cycles`` freezes per block."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    rclpy.init()
    probe = _Probe()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="frozen_subscriber_") as tmp:
            for _ in range(rounds):
                for config in configs:
                    rows.append(_block(probe, config, frozen, cycles, freeze_s, gap_s,
                                       gap_stall_s, Path(tmp)))
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        probe.close()
        rclpy.try_shutdown()
    print(format_table(rows))
    write_json(json_path, {"command": "dpr bench frozen-subscriber",
                           "cpu_count": os.cpu_count(), "rows": rows})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dpr bench frozen-subscriber",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=100, help="freezes per block")
    parser.add_argument("--rounds", type=int, default=2, help="blocks per configuration")
    parser.add_argument("--freeze-s", type=float, default=0.3, help="each freeze (s)")
    parser.add_argument("--gap-s", type=float, default=0.7, help="running between freezes (s)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--frozen", default="policy_node", choices=FROZEN,
                        help="the process frozen: a joint_states or a camera image subscriber")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    return run(cycles=args.cycles, rounds=args.rounds, freeze_s=args.freeze_s,
               gap_s=args.gap_s, configs=tuple(args.configs), frozen=args.frozen,
               json_path=args.json)


if __name__ == "__main__":
    sys.exit(main())
