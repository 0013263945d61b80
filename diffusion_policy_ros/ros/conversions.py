"""sensor_msgs <-> numpy / perception types. No algorithms here."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time
from sensor_msgs.msg import CameraInfo, Image, PointCloud2, PointField
from std_msgs.msg import Header

from diffusion_policy_ros.perception.geometry import CameraModel
from diffusion_policy_ros.perception.image_decoding import RawImage
from diffusion_policy_ros.perception.sampling import (
    XYZRGB_FIELDS,
    xyzrgb_bytes,
    xyzrgb_from_bytes,
)


def stamp_to_ns(stamp: Time) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def ns_to_stamp(ns: int) -> Time:
    return Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000))


def raw_image(msg: Image) -> RawImage:
    return RawImage(msg.height, msg.width, msg.encoding, msg.step, msg.data, bool(msg.is_bigendian))


def image_msg(raw: RawImage, header: Header) -> Image:
    msg = Image(header=header, height=raw.height, width=raw.width, encoding=raw.encoding,
                is_bigendian=int(raw.is_bigendian), step=raw.step)
    msg.data = bytes(raw.data)
    return msg


def camera_model(msg: CameraInfo) -> CameraModel:
    return CameraModel(int(msg.width), int(msg.height), tuple(float(v) for v in msg.k),
                       msg.distortion_model, tuple(float(v) for v in msg.d))


def camera_info_msg(camera: CameraModel, header: Header) -> CameraInfo:
    msg = CameraInfo(header=header, width=camera.width, height=camera.height,
                     distortion_model=camera.distortion_model or "plumb_bob")
    msg.k = [float(v) for v in camera.k]
    msg.d = [float(v) for v in camera.d]
    msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    msg.p = [camera.fx, 0.0, camera.cx, 0.0, 0.0, camera.fy, camera.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    return msg


def rgb8_image_msg(rgb: np.ndarray, header: Header) -> Image:
    h, w = rgb.shape[:2]
    msg = Image(header=header, height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3)
    msg.data = np.ascontiguousarray(rgb, dtype=np.uint8).tobytes()
    return msg


_XYZRGB_FIELDS = [PointField(name=n, offset=4 * i, datatype=PointField.FLOAT32, count=1)
                  for i, n in enumerate(XYZRGB_FIELDS)]


def xyzrgb_cloud_msg(points: np.ndarray, colors: np.ndarray, header: Header) -> PointCloud2:
    """Unordered PointCloud2 with float32 x y z and PCL-packed rgb (16 bytes a point)."""
    n = points.shape[0]
    msg = PointCloud2(header=header, height=1, width=n, fields=_XYZRGB_FIELDS,
                      is_bigendian=False, point_step=16, row_step=16 * n, is_dense=True)
    msg.data = xyzrgb_bytes(points, colors).tobytes()
    return msg


def xyzrgb_from_cloud_msg(msg: PointCloud2) -> tuple[np.ndarray, np.ndarray]:
    """(points ``(n, 3)`` float32, colours ``(n, 3)`` uint8) from an x y z rgb float32 cloud."""
    fields = {f.name: (f.offset, f.datatype) for f in msg.fields}
    return xyzrgb_from_bytes(msg.data, msg.width * msg.height, msg.point_step, fields)
