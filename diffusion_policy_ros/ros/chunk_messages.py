"""Action chunk -> ``policy/action_chunk`` and ``policy/markers`` messages. No algorithms here."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from builtin_interfaces.msg import Duration, Time
from geometry_msgs.msg import Point
from std_msgs.msg import ColorRGBA
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
from visualization_msgs.msg import Marker, MarkerArray


def duration_msg(seconds: float) -> Duration:
    ns = int(round(seconds * 1e9))
    return Duration(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def chunk_msg(actions: np.ndarray, joint_names: Sequence[str], stamp: Time,
              times_from_start: Sequence[Duration]) -> JointTrajectory:
    """(T, D) joint targets as a trajectory: point k at ``times_from_start[k]`` after the
    stamp of the observation the chunk was conditioned on."""
    msg = JointTrajectory(joint_names=list(joint_names))
    msg.header.stamp = stamp
    msg.points = [JointTrajectoryPoint(positions=row.tolist(), time_from_start=t)
                  for row, t in zip(actions, times_from_start, strict=True)]
    return msg


def chunk_markers(tool_path_m: np.ndarray, closing: bool, frame_id: str, stamp: Time,
                  lifetime_s: float) -> MarkerArray:
    """The chunk's end-effector path (a line) and its last point (a sphere, red when the
    gripper closes over the chunk), in ``frame_id``."""
    path = [Point(x=float(p[0]), y=float(p[1]), z=float(p[2])) for p in tool_path_m]
    lifetime = duration_msg(lifetime_s)
    line = Marker(ns="policy_ee_path", id=0, type=Marker.LINE_STRIP, action=Marker.ADD,
                  points=path, lifetime=lifetime)
    line.scale.x = 0.005
    line.color = ColorRGBA(r=0.1, g=0.8, b=0.2, a=1.0)
    target = Marker(ns="policy_ee_target", id=1, type=Marker.SPHERE, action=Marker.ADD,
                    lifetime=lifetime)
    target.pose.position = path[-1]
    target.scale.x = target.scale.y = target.scale.z = 0.02
    target.color = (ColorRGBA(r=0.9, g=0.1, b=0.1, a=0.9) if closing
                    else ColorRGBA(r=0.1, g=0.4, b=0.9, a=0.9))
    for marker in (line, target):
        marker.header.frame_id, marker.header.stamp = frame_id, stamp
        marker.pose.orientation.w = 1.0
    return MarkerArray(markers=[line, target])
