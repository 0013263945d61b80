"""Decode sensor_msgs/Image payloads into numpy views without ROS.

``RawImage`` mirrors the fields of sensor_msgs/Image so the node only copies
attributes; everything that can go wrong with a payload (unknown encoding,
short buffers, row padding, byte order) is handled and reported here.
"""

from __future__ import annotations

import array
import dataclasses

import numpy as np

#: A payload: a ROS message's ``array('B')``, bytes, or a bag reader's ndarray.
ImageData = bytes | bytearray | memoryview | array.array | np.ndarray

COLOR_ENCODINGS = {"bgra8": (4, (2, 1, 0)), "bgr8": (3, (2, 1, 0)),
                   "rgb8": (3, (0, 1, 2)), "rgba8": (4, (0, 1, 2))}
"""encoding -> (bytes per pixel, byte offsets of R, G, B)."""

DEPTH_ENCODINGS: dict[str, tuple[np.dtype, float]] = {
    "16UC1": (np.dtype("<u2"), 1000.0), "mono16": (np.dtype("<u2"), 1000.0),
    "32FC1": (np.dtype("<f4"), 1.0)}
"""encoding -> (little-endian element type, units per metre)."""


class FrameRejected(Exception):
    """A frame that cannot be used; ``reason`` is the counted drop reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass
class RawImage:
    """The fields of sensor_msgs/Image that decoding needs (``data`` is any buffer)."""

    height: int
    width: int
    encoding: str
    step: int
    data: ImageData
    is_bigendian: bool = False


def _rows(img: RawImage, bytes_per_pixel: int) -> np.ndarray:
    """``height x step`` uint8 view of the payload after checking its size."""
    if img.height <= 0 or img.width <= 0:
        raise FrameRejected("bad_size", f"image has size {img.width}x{img.height}")
    if img.step < img.width * bytes_per_pixel:
        raise FrameRejected("bad_step", f"{img.encoding} image step {img.step} < width "
                            f"{img.width} x {bytes_per_pixel} bytes per pixel")
    buf = np.frombuffer(img.data, dtype=np.uint8)
    expected = img.height * img.step
    if buf.size != expected:
        raise FrameRejected("bad_data_length", f"{img.encoding} image data has {buf.size} bytes, "
                            f"height*step = {img.height}*{img.step} = {expected}")
    return buf.reshape(img.height, img.step)


def color_view(img: RawImage) -> tuple[np.ndarray, tuple[int, int, int]]:
    """(``H x W x C`` uint8 view in the message's channel order, offsets of R, G, B).

    No copy is made: callers pick the pixels they need before reordering
    channels, which is what keeps 1280x720 frames cheap.
    """
    if img.encoding not in COLOR_ENCODINGS:
        raise FrameRejected("unknown_encoding", f"colour encoding '{img.encoding}' is not one of "
                            f"{sorted(COLOR_ENCODINGS)}")
    bpp, rgb = COLOR_ENCODINGS[img.encoding]
    rows = _rows(img, bpp)
    return rows[:, : img.width * bpp].reshape(img.height, img.width, bpp), rgb


def decode_color(img: RawImage) -> np.ndarray:
    """``H x W x 3`` uint8 RGB copy of a colour image."""
    view, rgb = color_view(img)
    return np.ascontiguousarray(view[:, :, list(rgb)])


def depth_view(img: RawImage) -> tuple[np.ndarray, float]:
    """(``H x W`` native-typed depth view, units per metre) honouring step and byte order."""
    if img.encoding not in DEPTH_ENCODINGS:
        raise FrameRejected("unknown_encoding", f"depth encoding '{img.encoding}' is not one of "
                            f"{sorted(DEPTH_ENCODINGS)}")
    dtype, units_per_m = DEPTH_ENCODINGS[img.encoding]
    rows = _rows(img, dtype.itemsize)
    if img.is_bigendian:
        dtype = dtype.newbyteorder(">")
    return rows[:, : img.width * dtype.itemsize].view(dtype), units_per_m


def depth_to_metres(values: np.ndarray, units_per_m: float, min_depth_m: float,
                    max_depth_m: float) -> np.ndarray:
    """float32 metres with 0, NaN, inf and out-of-range values set to NaN.

    Divides by units per metre (3000 mm -> exactly 3.0 m) rather than
    multiplying by 0.001, which lands 3000 mm just above a 3.0 m limit.
    """
    z = values.astype(np.float32)
    if units_per_m != 1.0:
        z /= np.float32(units_per_m)
    with np.errstate(invalid="ignore"):
        z[~((z > 0.0) & (z >= min_depth_m) & (z <= max_depth_m))] = np.nan
    return z


def decode_depth(img: RawImage, min_depth_m: float = 0.0,
                 max_depth_m: float = np.inf) -> np.ndarray:
    """``H x W`` float32 depth in metres, invalid pixels NaN."""
    values, units_per_m = depth_view(img)
    return depth_to_metres(values, units_per_m, min_depth_m, max_depth_m)
