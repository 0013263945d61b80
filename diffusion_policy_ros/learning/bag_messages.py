"""Standard ROS 2 messages as rosbags typestore objects (pure Python, no rclpy).

Bags written with these deserialize with ``rclpy.serialization`` into the very
same sensor_msgs / trajectory_msgs / std_msgs types the nodes use (Kilted
definitions), so ``ros2 bag play`` and our replay publish them unchanged.
"""

from __future__ import annotations

import numpy as np
from rosbags.typesys import Stores, get_typestore

from diffusion_policy_ros.perception.geometry import CameraModel
from diffusion_policy_ros.perception.image_decoding import RawImage
from diffusion_policy_ros.perception.sampling import (
    POINTFIELD_FLOAT32,
    XYZRGB_FIELDS,
    xyzrgb_bytes,
    xyzrgb_from_bytes,
)

TYPESTORE = get_typestore(Stores.ROS2_KILTED)
T = TYPESTORE.types

IMAGE = "sensor_msgs/msg/Image"
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
POINT_CLOUD2 = "sensor_msgs/msg/PointCloud2"
JOINT_STATE = "sensor_msgs/msg/JointState"
JOINT_TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
STRING = "std_msgs/msg/String"


def serialize(msg) -> bytes:
    return bytes(TYPESTORE.serialize_cdr(msg, msg.__msgtype__))


def deserialize(raw: bytes, msgtype: str):
    return TYPESTORE.deserialize_cdr(raw, msgtype)


def header(stamp_ns: int, frame_id: str = ""):
    stamp = T["builtin_interfaces/msg/Time"](sec=int(stamp_ns // 1_000_000_000),
                                             nanosec=int(stamp_ns % 1_000_000_000))
    return T["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)


def stamp_ns_of(msg) -> int:
    return int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)


def image(raw: RawImage, stamp_ns: int, frame_id: str):
    data = np.frombuffer(raw.data, dtype=np.uint8)
    return T[IMAGE](header=header(stamp_ns, frame_id), height=raw.height, width=raw.width,
                    encoding=raw.encoding, is_bigendian=int(raw.is_bigendian), step=raw.step,
                    data=data)


def rgb8_image(rgb: np.ndarray, stamp_ns: int, frame_id: str):
    h, w = rgb.shape[:2]
    return image(RawImage(h, w, "rgb8", w * 3, np.ascontiguousarray(rgb, np.uint8).tobytes()),
                 stamp_ns, frame_id)


def raw_image(msg) -> RawImage:
    return RawImage(int(msg.height), int(msg.width), msg.encoding, int(msg.step), msg.data,
                    bool(msg.is_bigendian))


def camera_info(camera: CameraModel, stamp_ns: int, frame_id: str):
    roi = T["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0,
                                                do_rectify=False)
    p = [camera.fx, 0.0, camera.cx, 0.0, 0.0, camera.fy, camera.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    return T[CAMERA_INFO](header=header(stamp_ns, frame_id), height=camera.height,
                          width=camera.width, distortion_model=camera.distortion_model,
                          d=np.asarray(camera.d, dtype=np.float64),
                          k=np.asarray(camera.k, dtype=np.float64),
                          r=np.eye(3).reshape(-1), p=np.asarray(p), binning_x=0, binning_y=0,
                          roi=roi)


def camera_model(msg) -> CameraModel:
    return CameraModel(int(msg.width), int(msg.height), tuple(float(v) for v in msg.k),
                       msg.distortion_model, tuple(float(v) for v in msg.d))


def xyzrgb_cloud(points: np.ndarray, colors: np.ndarray, stamp_ns: int, frame_id: str):
    field = T["sensor_msgs/msg/PointField"]
    fields = [field(name=n, offset=4 * i, datatype=POINTFIELD_FLOAT32, count=1)
              for i, n in enumerate(XYZRGB_FIELDS)]
    n = points.shape[0]
    return T[POINT_CLOUD2](header=header(stamp_ns, frame_id), height=1, width=n, fields=fields,
                           is_bigendian=False, point_step=16, row_step=16 * n,
                           data=xyzrgb_bytes(points, colors), is_dense=True)


def xyzrgb_from_cloud(msg) -> tuple[np.ndarray, np.ndarray]:
    """(points ``(n, 3)`` float32, colours ``(n, 3)`` uint8) of an x y z rgb float32 cloud."""
    fields = {f.name: (f.offset, f.datatype) for f in msg.fields}
    return xyzrgb_from_bytes(np.asarray(msg.data, dtype=np.uint8),
                             int(msg.width) * int(msg.height), int(msg.point_step), fields)


def joint_state(names, position, velocity, effort, stamp_ns: int):
    return T[JOINT_STATE](header=header(stamp_ns), name=list(names),
                          position=np.asarray(position, dtype=np.float64),
                          velocity=np.asarray(velocity, dtype=np.float64),
                          effort=np.asarray(effort, dtype=np.float64))


def joint_trajectory(joint_names, positions: np.ndarray, dt_s: float, stamp_ns: int):
    """Action chunk layout of ARCHITECTURE.md: point k at ``k * dt_s`` after the stamp."""
    point = T["trajectory_msgs/msg/JointTrajectoryPoint"]
    duration = T["builtin_interfaces/msg/Duration"]
    empty = np.zeros(0, dtype=np.float64)
    points = []
    for k, row in enumerate(np.asarray(positions, dtype=np.float64)):
        ns = int(round(k * dt_s * 1e9))
        points.append(point(positions=row, velocities=empty, accelerations=empty, effort=empty,
                            time_from_start=duration(sec=ns // 1_000_000_000,
                                                     nanosec=ns % 1_000_000_000)))
    return T[JOINT_TRAJECTORY](header=header(stamp_ns), joint_names=list(joint_names),
                               points=points)


def string(text: str):
    return T[STRING](data=text)
