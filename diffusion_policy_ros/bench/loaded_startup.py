"""``dpr bench loaded-startup``: ``sim_node`` started again and again next to CPU burners,
with a test-like subscriber in this process.

Each cycle starts ``sim_node`` (``config/sim.yaml``, wall clock), waits until this
process gets its ``joint_states`` and diagnostics, listens for ``listen_s``, then sends
zero efforts at 200 Hz until the sim reports them (its ``/diagnostics``: commands not
stale), and stops it by PID. This process subscribes as ``test/ros/test_sim_node.py``
does (reliable ``joint_states`` and ``/diagnostics``, the camera's three topics) and
keeps Fast DDS's default transports (shared memory). ``burners`` CPU-burning processes
(this bench's children, stopped by PID) share the cores throughout.

Per cycle: whether ``sim_node`` exited by itself, the samples it counted as refused by
the middleware (``publish_refused``), when the sim had the first command (the header
stamp of its first report saying so, after the first send), when this process got that
report, and the latest a report reached this process (arrival - header stamp).
"""

from __future__ import annotations

import argparse
import json
import os
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
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray

from diffusion_policy_ros.bench.json_report import write_json
from diffusion_policy_ros.config import CONFIG_DIR
from diffusion_policy_ros.ros.conversions import stamp_to_ns
from diffusion_policy_ros.ros.processes import stop_process

#: A report this much later than its stamp counts as late.
LATE_S = 1.0


class _Subscriber:
    """This process's view: joint_states count, sim_node's reports with stamp and arrival."""

    def __init__(self) -> None:
        self.node = rclpy.create_node("loaded_startup_bench")
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.states = 0
        self.reports: list[tuple[float, float, dict[str, str]]] = []  # (arrival, stamp, values)
        self.node.create_subscription(JointState, "joint_states", self._on_state,
                                      QoSProfile(depth=1000))
        for kind, topic in ((Image, "camera/rgb/image_raw"),
                            (Image, "camera/depth_to_rgb/image_raw"),
                            (CameraInfo, "camera/rgb/camera_info")):
            self.node.create_subscription(kind, topic, lambda _m: None, QoSProfile(depth=5))
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag,
                                      QoSProfile(depth=50))
        self.efforts = self.node.create_publisher(Float64MultiArray, "arm_controller/commands",
                                                  QoSProfile(depth=1))

    def _on_state(self, _msg: JointState) -> None:
        self.states += 1

    def _on_diag(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith("sim_node"):
                self.reports.append((time.time(), stamp_to_ns(msg.header.stamp) * 1e-9,
                                     {kv.key: kv.value for kv in status.values}))

    def spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=min(0.01, max(0.0, end - time.monotonic())))

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()


def _has_command(values: dict[str, str]) -> bool:
    return values.get("commands_stale") == "false" and values.get("command_age_s") != "nan"


def _cycle(sub: _Subscriber, index: int, listen_s: float, timeout_s: float,
           work_dir: Path) -> dict:
    sub.states, sub.reports = 0, []
    log_path = work_dir / f"sim_node_{index}.log"
    with open(log_path, "wb") as log:
        sim = subprocess.Popen(
            [sys.executable, "-m", "diffusion_policy_ros.ros.sim_node", "--ros-args",
             "--params-file", str(CONFIG_DIR / "sim.yaml"), "-p", "diagnostics_period_s:=0.2",
             "-p", "time_limit_s:=3600.0"], stdout=log, stderr=subprocess.STDOUT)
    row: dict[str, object] = {"cycle": index}
    try:
        deadline = time.monotonic() + timeout_s
        while (sub.states < 50 or not sub.reports or sub.efforts.get_subscription_count() < 1):
            if time.monotonic() > deadline or sim.poll() is not None:
                break
            sub.spin_for(0.05)
        sub.spin_for(listen_s)
        first_send = time.time()
        had, got = None, None
        while sim.poll() is None and time.monotonic() < deadline + listen_s + timeout_s:
            sub.efforts.publish(Float64MultiArray(data=[0.0] * 6))
            sub.spin_for(0.005)
            fresh = next(((a, s) for a, s, v in sub.reports if s >= first_send
                          and _has_command(v)), None)
            if fresh is not None:
                got, had = fresh[0] - first_send, fresh[1] - first_send
                break
        late = [a - s for a, s, _ in sub.reports if s >= first_send]
        row.update({
            "exited": sim.poll() is not None,
            "publish_refused": int(sub.reports[-1][2].get("publish_refused", 0))
            if sub.reports else 0,
            "sim_had_command_s": None if had is None else round(had, 3),
            "report_received_s": None if got is None else round(got, 3),
            "report_late_max_s": round(max(late), 3) if late else None,
        })
        if row["exited"]:
            row["log_tail"] = log_path.read_text(errors="replace")[-400:]
    finally:
        stop_process(sim)
    return row


def summarize(rows: list[dict]) -> dict:
    """The cycles' figures in one row."""
    had = [r["sim_had_command_s"] for r in rows if r["sim_had_command_s"] is not None]
    late = [r["report_late_max_s"] for r in rows if r["report_late_max_s"] is not None]
    return {
        "cycles": len(rows),
        "exited": sum(r["exited"] for r in rows),
        "cycles_with_refused": sum(r["publish_refused"] > 0 for r in rows),
        "no_command_reported": sum(r["sim_had_command_s"] is None for r in rows),
        "sim_had_command_s_median": round(statistics.median(had), 3) if had else None,
        "sim_had_command_s_max": max(had) if had else None,
        "cycles_with_a_late_report": sum(x >= LATE_S for x in late),
        "report_late_max_s": max(late) if late else None,
    }


def format_table(summary: dict, burners: int) -> str:
    s = summary
    return "\n".join([
        "| burners | cycles | sim_node exited | cycles with a refused sample | sim had the "
        "first command, median / max (s) | no command reported | cycles with a report "
        f">= {LATE_S:g} s late | latest report (s) |",
        "|---|---|---|---|---|---|---|---|",
        f"| {burners} | {s['cycles']} | {s['exited']} | {s['cycles_with_refused']} | "
        f"{s['sim_had_command_s_median']} / {s['sim_had_command_s_max']} | "
        f"{s['no_command_reported']} | {s['cycles_with_a_late_report']} | "
        f"{s['report_late_max_s']} |"])


def run(cycles: int = 10, burners: int = 4, listen_s: float = 6.0, timeout_s: float = 60.0,
        json_path: str | None = None) -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(burners)]
    rclpy.init()
    sub = _Subscriber()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="loaded_startup_") as tmp:
            for index in range(1, cycles + 1):
                rows.append(_cycle(sub, index, listen_s, timeout_s, Path(tmp)))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        sub.close()
        rclpy.try_shutdown()
        for proc in procs:
            proc.kill()
            proc.wait()
    summary = summarize(rows)
    print(format_table(summary, burners))
    write_json(json_path, {"command": "dpr bench loaded-startup", "cpu_count": os.cpu_count(),
                           "burners": burners, "summary": summary, "rows": rows})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dpr bench loaded-startup",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=10, help="sim_node start-ups")
    parser.add_argument("--burners", type=int, default=4, help="CPU-burning processes")
    parser.add_argument("--listen-s", type=float, default=6.0,
                        help="listening before the commands start (s)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    return run(cycles=args.cycles, burners=args.burners, listen_s=args.listen_s,
               json_path=args.json)


if __name__ == "__main__":
    sys.exit(main())
