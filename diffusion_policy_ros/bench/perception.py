"""``dpr bench perception``: per-frame cost of the RGB-D observation pipeline vs open3d.

Both sides get the same synthetic Kinect frames (pinhole intrinsics, since
open3d's ``create_from_rgbd_image`` ignores lens distortion). Ours: sync
buffer + decode + back-project + transform + crop + voxel + sampling to
``num_points`` + policy image. open3d: decode + ``create_from_rgbd_image``
(with the extrinsic) + crop + ``voxel_down_sample``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import open3d as o3d

from diffusion_policy_ros.perception.geometry import CameraModel
from diffusion_policy_ros.perception.image_decoding import RawImage, decode_color, depth_view
from diffusion_policy_ros.perception.pipeline import RgbdObservationPipeline, RgbdSyncConfig
from diffusion_policy_ros.perception.sync_buffer import RgbdSyncBuffer
from diffusion_policy_ros.perception.synthetic_scene import (
    KINECT_720P,
    KINECT_NFOV,
    SyntheticKinect,
)

T = TypeVar("T")

RESOLUTIONS = {"640x576": KINECT_NFOV, "1280x720": KINECT_720P}
WORKSPACES = {"default (table cropped)": None, "table included": [0.15, -0.45, -0.02]}


def open3d_baseline(color: RawImage, depth: RawImage, camera: CameraModel,
                    cfg: RgbdSyncConfig) -> np.ndarray:
    rgb = decode_color(color)
    depth_u16 = np.ascontiguousarray(depth_view(depth)[0])
    # numpy declares the buffer protocol (__buffer__) to type checkers from Python 3.12 only
    images = o3d.geometry.Image(rgb), o3d.geometry.Image(depth_u16)  # type: ignore[call-overload]
    rgbd = o3d.geometry.RGBDImage.create_from_color_and_depth(
        *images, depth_scale=1000.0, depth_trunc=cfg.max_depth_m,
        convert_rgb_to_intensity=False)
    intrinsic = o3d.camera.PinholeCameraIntrinsic(camera.width, camera.height, camera.fx,
                                                  camera.fy, camera.cx, camera.cy)
    extrinsic = cfg.camera_to_base().inverse().matrix()
    cloud = o3d.geometry.PointCloud.create_from_rgbd_image(rgbd, intrinsic, extrinsic)
    box = o3d.geometry.AxisAlignedBoundingBox(np.asarray(cfg.workspace_min, dtype=float),
                                              np.asarray(cfg.workspace_max, dtype=float))
    return np.asarray(cloud.crop(box).voxel_down_sample(cfg.voxel_size_m).points)


def _nearest_mm(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    a = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(src.astype(np.float64)))
    b = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(dst.astype(np.float64)))
    return np.asarray(a.compute_point_cloud_distance(b)) * 1e3


def _timed(fn: Callable[[int], T], frames: int) -> tuple[np.ndarray, T]:
    times = []
    for i in range(frames):
        t = time.perf_counter()
        out = fn(i)
        times.append(time.perf_counter() - t)
    return np.asarray(times) * 1e3, out


def run(frames: int = 100) -> list[dict]:
    rows = []
    for res_name, distorted in RESOLUTIONS.items():
        camera = dataclasses.replace(distorted, distortion_model="plumb_bob", d=(0.0,) * 5)
        for ws_name, ws_min in WORKSPACES.items():
            cfg = RgbdSyncConfig()
            if ws_min is not None:
                cfg = dataclasses.replace(cfg, workspace_min=ws_min)
            kinect = SyntheticKinect(camera, cfg.camera_to_base())
            color, depth = kinect.color_image(), kinect.depth_image()
            pipe = RgbdObservationPipeline(cfg)
            pipe.set_camera(camera)
            buffer = RgbdSyncBuffer()

            def ours(i, pipe=pipe, buffer=buffer, color=color, depth=depth):
                stamp = 1_000_000_000 + i * 33_333_333
                buffer.add_color(stamp, color)
                (pair,) = buffer.add_depth(stamp, depth)
                return pipe.process(pair.color, pair.depth)

            def baseline(i, color=color, depth=depth, camera=camera, cfg=cfg):
                return open3d_baseline(color, depth, camera, cfg)

            ours(-1), baseline(-1)
            t_ours, obs = _timed(ours, frames)
            t_o3d, o3d_points = _timed(baseline, frames)
            rows.append({
                "resolution": res_name, "workspace": ws_name,
                "ours_ms_p50": float(np.median(t_ours)),
                "ours_ms_p99": float(np.percentile(t_ours, 99)),
                "open3d_ms_p50": float(np.median(t_o3d)),
                "open3d_ms_p99": float(np.percentile(t_o3d, 99)),
                "speedup_p50": float(np.median(t_o3d) / np.median(t_ours)),
                "ours_voxel_points": obs.num_valid, "open3d_voxel_points": int(len(o3d_points)),
                "pixel_stride": pipe.stride,
                "ours_to_open3d_mm_max": float(_nearest_mm(obs.points, o3d_points).max()),
                "open3d_to_ours_mm_p99": float(np.percentile(_nearest_mm(o3d_points, obs.points),
                                                             99)),
                "voxel_mm": cfg.voxel_size_m * 1e3,
            })
    return rows


def format_table(rows: list[dict]) -> str:
    head = ("| frame | workspace | ours p50 / p99 (ms) | open3d p50 / p99 (ms) | speed-up | "
            "voxel points ours / open3d | ours->open3d max (mm) | open3d->ours p99 (mm) |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        lines.append(
            f"| {r['resolution']} | {r['workspace']} | "
            f"{r['ours_ms_p50']:.2f} / {r['ours_ms_p99']:.2f}"
            f" | {r['open3d_ms_p50']:.2f} / {r['open3d_ms_p99']:.2f} | {r['speedup_p50']:.1f}x | "
            f"{r['ours_voxel_points']} / {r['open3d_voxel_points']} | "
            f"{r['ours_to_open3d_mm_max']:.1f} | {r['open3d_to_ours_mm_p99']:.1f} |")
    return "\n".join(lines)
