"""``dpr table-floor``: the workspace floor a camera's depth noise asks for, from a bag."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def add_parser(sub) -> None:
    floor = sub.add_parser(
        "table-floor", help="measure the table top's height and depth noise from recorded "
        "depth frames and say which workspace_min z keeps the table out of the cloud")
    floor.add_argument("--bag", required=True, help="rosbag2 with camera/depth_to_rgb/image_raw "
                       "and camera/rgb/camera_info (dpr collect --raw-camera, or ros2 bag "
                       "record on the robot), the table in view")
    floor.add_argument("--config", help="rgbd_sync_node params file: camera_to_base, workspace "
                       "and depth range (default config/rgbd_sync.yaml)")
    floor.add_argument("--frames", type=int, default=30, help="depth frames to use (first N)")
    floor.add_argument("--leak-per-frame", type=float, default=0.01,
                       help="table pixels per frame the recommended floor may let through "
                       "(Gaussian noise of the measured spread)")
    floor.add_argument("--report", help="also write the figures to this JSON file")
    floor.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.config import CONFIG_DIR, load_config
    from diffusion_policy_ros.learning.episode_bag import read_depth_frames
    from diffusion_policy_ros.perception.geometry import CameraModel, PixelRays
    from diffusion_policy_ros.perception.image_decoding import FrameRejected, decode_depth
    from diffusion_policy_ros.perception.pipeline import RgbdSyncConfig
    from diffusion_policy_ros.perception.table_floor import (
        estimate_table_floor,
        table_heights_m,
        table_pixels_above,
    )

    if args.frames < 1:
        raise ValueError(f"--frames must be at least 1, got {args.frames}")
    if not 0.0 < args.leak_per_frame < 1.0:
        raise ValueError(f"--leak-per-frame must be in (0, 1), got {args.leak_per_frame}")
    config = load_config(RgbdSyncConfig, Path(args.config or CONFIG_DIR / "rgbd_sync.yaml"),
                         "rgbd_sync_node")
    workspace, camera_to_base = config.workspace(), config.camera_to_base()
    frames = read_depth_frames(args.bag, args.frames)
    if len({(camera.width, camera.height) for camera, _ in frames}) > 1:
        raise ValueError(f"{args.bag}: the depth frames change size; record one camera mode")
    rays: dict[CameraModel, PixelRays] = {}
    rows, rejected = [], []
    for camera, depth in frames:
        try:
            if camera not in rays:
                camera.validate()
                rays[camera] = PixelRays.build(camera, camera_to_base, stride=1)
            if (depth.height, depth.width) != (camera.height, camera.width):
                raise FrameRejected("size_mismatch", f"depth image {depth.width}x{depth.height}"
                                    f" but camera_info {camera.width}x{camera.height}")
            depth_m = decode_depth(depth, config.min_depth_m, config.max_depth_m)
        except FrameRejected as exc:
            rejected.append(str(exc))
            continue
        rows.append(table_heights_m(depth_m, rays[camera], workspace))
    if rejected:
        print(f"skipped {len(rejected)} of {len(frames)} depth frames: {rejected[0]}")
    if not rows:
        raise ValueError(f"{args.bag}: no usable depth frame ({rejected[0]})")
    heights = np.stack(rows)
    table = estimate_table_floor(heights, leak_per_frame=args.leak_per_frame)
    floor_z = float(config.workspace_min[2])
    leaking = table_pixels_above(heights, table, floor_z)
    mm = 1e3
    above = ", ".join(f"{k} {v * mm:.1f}" for k, v in table.above_table_m.items())
    print(f"table top z = {table.table_z_m * mm:.1f} mm in {config.base_frame} "
          f"({table.frames} frames, {table.table_pixels} table pixels each); noise sigma "
          f"{table.noise_sigma_m * mm:.2f} mm; above the table (mm): {above}")
    print(f"configured floor: workspace_min z = {floor_z * mm:.1f} mm: {leaking:.1f} table "
          f"pixels per frame above it")
    gaussian_mm = table.recommended_sigmas * table.noise_sigma_m * mm
    print(f"recommended: workspace_min z >= {table.recommended_floor_z_m * mm:.1f} mm: the "
          f"table + the higher of {gaussian_mm:.1f} mm ({table.recommended_sigmas:.1f} sigma, "
          f"{args.leak_per_frame:g} table pixels per frame for Gaussian noise) and "
          f"{table.above_table_m['max'] * mm:.1f} mm (the highest table pixel seen)")
    if args.report:
        Path(args.report).write_text(json.dumps({
            "bag": str(args.bag), "table_z_m": table.table_z_m,
            "noise_sigma_m": table.noise_sigma_m, "frames": table.frames,
            "table_pixels": table.table_pixels, "above_table_m": table.above_table_m,
            "configured_floor_z_m": floor_z, "table_pixels_above_floor_per_frame": leaking,
            "leak_per_frame": args.leak_per_frame, "recommended_sigmas": table.recommended_sigmas,
            "recommended_floor_z_m": table.recommended_floor_z_m,
        }, indent=2) + "\n")
    return 0
