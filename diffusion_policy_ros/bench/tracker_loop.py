"""``dpr bench tracker``: pd_tracker_node loop timing at 500 Hz and 1 kHz, under three loads.

The node runs as its own process with ``config/pd_tracker.yaml`` (on its timer, as on
a real arm); this process feeds ``joint_states`` (250 Hz) and action chunks (10 Hz)
and reads the node's own ``/diagnostics`` (period error and tick compute time over
its last 5000 ticks). Loads: ``none``; ``policy``, a separate process doing
policy-sized work (torch matrix products on one thread for 50 ms out of every
100 ms; the policy keeps to one intra-op thread so the tracker keeps a core);
``saturated``, that plus two CPU-burning processes per core (a busy robot computer).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import subprocess
import sys
import time

import rclpy
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import QoSProfile
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from diffusion_policy_ros.bench.json_report import write_json
from diffusion_policy_ros.config import CONFIG_DIR
from diffusion_policy_ros.ros.processes import stop_process

ARM = [f"joint_{i}" for i in range(1, 7)]
Q0 = [0.0, -1.57, 1.57, -1.57, -1.57, 0.0]


def policy_sized_load(stop_at: float, busy_s: float = 0.05, period_s: float = 0.1) -> None:
    import torch

    torch.set_num_threads(1)
    a = torch.randn(384, 384)
    while time.time() < stop_at:
        start = time.time()
        while time.time() - start < busy_s:
            a = torch.tanh(a @ a * 1e-2)
        time.sleep(max(0.0, period_s - (time.time() - start)))


LOADS = ("none", "policy", "saturated")


def _measure(rate_hz: float, load: str, seconds: float, priority: int) -> dict[str, str]:
    proc = subprocess.Popen([sys.executable, "-m", "diffusion_policy_ros.ros.pd_tracker_node",
                             "--ros-args", "--params-file", str(CONFIG_DIR / "pd_tracker.yaml"),
                             "-p", f"rate_hz:={rate_hz}", "-p", f"realtime_priority:={priority}"],
                            stdout=subprocess.DEVNULL)
    loader: multiprocessing.Process | None = None
    burners: list[subprocess.Popen] = []
    node = rclpy.create_node("tracker_bench")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    latest: dict[str, str] = {}

    def on_diag(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith("pd_tracker_node"):
                latest.clear()
                latest.update({kv.key: kv.value for kv in status.values})

    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, QoSProfile(depth=10))
    state_pub = node.create_publisher(JointState, "joint_states", QoSProfile(depth=10))
    chunk_pub = node.create_publisher(JointTrajectory, "policy/action_chunk", QoSProfile(depth=2))

    def publish_state() -> None:
        msg = JointState(name=ARM + ["gripper_joint"], position=Q0 + [0.085], velocity=[0.0] * 7)
        msg.header.stamp = node.get_clock().now().to_msg()
        state_pub.publish(msg)

    def publish_chunk() -> None:
        msg = JointTrajectory(joint_names=ARM + ["gripper_joint"])
        msg.header.stamp = node.get_clock().now().to_msg()
        phase = time.monotonic()
        for k in range(16):
            offset = 0.2 * math.sin(phase + 0.1 * k)
            ns = int(k * 1e8)
            msg.points.append(JointTrajectoryPoint(
                positions=[q + offset for q in Q0] + [0.04],
                time_from_start=Duration(sec=ns // 10**9, nanosec=ns % 10**9)))
        chunk_pub.publish(msg)

    try:
        node.create_timer(0.004, publish_state)
        deadline = time.monotonic() + 30.0
        while not latest and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        if load != "none":
            loader = multiprocessing.Process(target=policy_sized_load,
                                             args=(time.time() + seconds + 2.0,))
            loader.start()
        if load == "saturated":
            burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                       for _ in range(2 * (os.cpu_count() or 1))]
        node.create_timer(0.1, publish_chunk)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        latest.clear()
        deadline = time.monotonic() + 3.0
        while not latest and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        return dict(latest)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        if loader is not None:
            loader.terminate()
            loader.join()
        executor.shutdown()
        node.destroy_node()
        stop_process(proc)


def format_table(rows: list[dict]) -> str:
    lines = ["| rate | load | scheduling | loop rate (Hz) | period error p50 / p99 / max (ms) "
             "| tick p50 / p99 (ms) | skipped deadlines |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        d = row["diagnostics"]
        head = f"| {row['rate_hz']:.0f} Hz | {row['load']} |"
        if not d:
            lines.append(f"{head} | no diagnostics | | | |")
            continue
        lines.append(
            f"{head} {d['scheduling']} | {d['loop_rate_hz']} | "
            f"{float(d['period_error_ms_p50']):.3f} / {float(d['period_error_ms_p99']):.3f} / "
            f"{float(d['period_error_ms_max']):.3f} | {float(d['tick_ms_p50']):.3f} / "
            f"{float(d['tick_ms_p99']):.3f} | {d.get('skipped_deadlines', '')} |")
    return "\n".join(lines)


def run(seconds: float = 10.0, priorities: tuple[int, ...] = (0, 50),
        rates_hz: tuple[float, ...] = (500.0, 1000.0), loads: tuple[str, ...] = LOADS,
        json_path: str | None = None) -> int:
    """Each rate x load x ``realtime_priority`` (0: normal scheduling) for ``seconds``."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    rclpy.init()
    rows = []
    try:
        for rate_hz in rates_hz:
            for load in loads:
                for priority in priorities:
                    rows.append({"rate_hz": rate_hz, "load": load, "realtime_priority": priority,
                                 "diagnostics": _measure(rate_hz, load, seconds, priority)})
    finally:
        rclpy.try_shutdown()
    print(format_table(rows))
    write_json(json_path, {"command": "dpr bench tracker", "seconds": seconds,
                           "cpu_count": os.cpu_count(), "rows": rows})
    return 0 if all(row["diagnostics"] for row in rows) else 1
