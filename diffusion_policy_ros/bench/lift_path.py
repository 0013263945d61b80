"""``dpr bench lift-path``: the stalled-grasp lift's path solve, batched vs point by point.

``StalledGraspLift`` solves its vertical lift path (``SerialChainKinematics.
vertical_lift_path``) on the policy's worker thread when a lift starts, so the chunk
that starts it comes that much later. The path is solved for every point at once;
the reference here is damped least squares point by point, each from the previous
point's solution with two iterations. Prints the median
time of each over interleaved repeats from the grasp pose, the speed-up, and over
``--poses`` arms scattered around it: how many each solves within the lift's
tolerance, their pose errors and the largest joint difference between the two paths.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
import torch

from diffusion_policy_ros.acting.grasp_lift import StalledGraspLift, lift_rise_m
from diffusion_policy_ros.acting.grasp_rules import load_grasp_rules
from diffusion_policy_ros.bench.json_report import write_json
from diffusion_policy_ros.config import CONFIG_DIR
from diffusion_policy_ros.description import TOOL_LINK, URDF_PATH
from diffusion_policy_ros.policy.kinematics import SerialChainKinematics, urdf_kinematics
from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES

#: The tool 3 cm over the table, the gripper down: where grasps stall.
GRASP_POSE_RAD = np.array([0.0, -1.2, 2.1, -2.45, -1.57, 1.2])


@torch.no_grad()
def point_by_point_path(arm: SerialChainKinematics, q0_rad: np.ndarray, rise_m: np.ndarray,
                        iterations: int = 2,
                        damping: float = 1e-4) -> tuple[np.ndarray, float]:
    """The reference: ``vertical_lift_path``'s problem solved one point at a time, each
    from the previous solution, Jacobian by central differences."""
    n = arm.n_joints
    dtype = arm.joint_axis.dtype
    q = torch.as_tensor(np.asarray(q0_rad, dtype=np.float64)[:n], dtype=dtype)
    p0, r0 = arm.pose(q)
    step = 1e-6 if dtype == torch.float64 else 1e-3
    probes = torch.cat([torch.eye(n, dtype=dtype), -torch.eye(n, dtype=dtype)]) * step

    path, worst = [], 0.0
    for rise in np.asarray(rise_m, dtype=np.float64):
        target = p0 + torch.tensor([0.0, 0.0, rise], dtype=dtype)
        for _ in range(iterations):
            both = arm.pose_error(q + probes, target, r0)
            jacobian = ((both[:n] - both[n:]) / (2 * step)).T
            lhs = jacobian @ jacobian.T + damping * torch.eye(6, dtype=dtype)
            q = q - jacobian.T @ torch.linalg.solve(lhs, arm.pose_error(q, target, r0))
        worst = max(worst, float(arm.pose_error(q, target, r0).abs().max()))
        path.append(q.clone())
    return torch.stack(path).numpy().astype(np.float64), worst


def run(repeats: int, poses: int, action_dt_s: float = 0.1, spread_rad: float = 0.3,
        seed: int = 0) -> dict:
    arm = urdf_kinematics(URDF_PATH, ARM_JOINT_NAMES, TOOL_LINK)
    rise = lift_rise_m(load_grasp_rules(CONFIG_DIR / "grasp_rules.yaml").grasp_lift, action_dt_s)
    solvers = {"batched": arm.vertical_lift_path,
               "point_by_point": lambda q, r: point_by_point_path(arm, q, r)}
    times: dict[str, list[float]] = {name: [] for name in solvers}
    with torch.no_grad():
        for _ in range(repeats):  # interleaved, so drifting machine load hits both
            for name, solve in solvers.items():
                t0 = time.perf_counter()
                solve(GRASP_POSE_RAD, rise)
                times[name].append(time.perf_counter() - t0)
        rng = np.random.default_rng(seed)
        errors: dict[str, list[float]] = {name: [] for name in solvers}
        joint_diff = 0.0
        for _ in range(poses):
            q0 = GRASP_POSE_RAD + rng.normal(0.0, spread_rad, GRASP_POSE_RAD.shape)
            paths = {}
            for name, solve in solvers.items():
                paths[name], error = solve(q0, rise)
                errors[name].append(error)
            if max(errors["batched"][-1], errors["point_by_point"][-1]) \
                    <= StalledGraspLift.MAX_PATH_ERROR:
                joint_diff = max(joint_diff, float(np.abs(paths["batched"]
                                                          - paths["point_by_point"]).max()))
    row: dict[str, float | None] = {
        "points": len(rise), "rise_m": float(rise[-1]), "repeats": repeats, "poses": poses,
        "max_joint_diff_rad": joint_diff}
    ms_p50: dict[str, float] = {}
    for name in solvers:
        solved = np.array(errors[name]) <= StalledGraspLift.MAX_PATH_ERROR
        row[f"{name}_ms_p50"] = ms_p50[name] = float(np.median(times[name])) * 1e3
        row[f"{name}_solved"] = int(solved.sum())
        row[f"{name}_error_p50"] = float(np.median(np.array(errors[name])[solved])) \
            if solved.any() else None
        row[f"{name}_error_max"] = float(np.max(np.array(errors[name])[solved])) \
            if solved.any() else None
    row["speedup"] = ms_p50["point_by_point"] / ms_p50["batched"]
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40, help="timed solves of each")
    parser.add_argument("--poses", type=int, default=300,
                        help="arm poses around the grasp pose for the accuracy figures")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (policy_node runs one)")
    parser.add_argument("--json", help="also write the row to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    r = run(args.repeats, args.poses)
    print(f"lift path: {r['points']} points, {r['rise_m']:.2f} m, {args.threads} thread(s); "
          f"median of {r['repeats']} interleaved solves from the grasp pose")
    print(f"  batched        {r['batched_ms_p50']:7.2f} ms")
    print(f"  point by point {r['point_by_point_ms_p50']:7.2f} ms  ({r['speedup']:.1f}x the "
          f"batched time)")
    print(f"over {r['poses']} poses around it (normal, 0.3 rad per joint), solved within "
          f"{StalledGraspLift.MAX_PATH_ERROR * 1e3:g} mm:")
    for name in ("batched", "point_by_point"):
        if r[f"{name}_solved"]:
            print(f"  {name:<15}{r[f'{name}_solved']:4d}, pose error median "
                  f"{r[f'{name}_error_p50']:.1e}, max {r[f'{name}_error_max']:.1e}")
        else:
            print(f"  {name:<15}{r[f'{name}_solved']:4d}")
    print(f"  largest joint difference between the two paths: {r['max_joint_diff_rad']:.1e} rad")
    write_json(args.json, r)


if __name__ == "__main__":
    main()
