"""Action chunks as plain data, and their validation (reject with a reason, never raise).

An ``ActionChunk`` is what ``pd_tracker_node`` builds from a
``trajectory_msgs/JointTrajectory`` on ``policy/action_chunk``: the stamp of the
observation the policy was conditioned on, the joint names of the message (any
order), each point's ``time_from_start`` and its positions. Point ``k`` is meant
for the absolute time ``stamp_s + times_from_start_s[k]``.

``validate_chunk`` maps the chunk onto the configured joint order and checks
everything that does not depend on the tracker's state; ``ChunkRejected``
carries a ``RejectReason`` so rejections can be counted per class.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class ActionChunk:
    """One policy output: ``positions[k][j]`` for ``joint_names[j]`` at ``stamp_s + times[k]``."""

    stamp_s: float
    """Stamp of the observation the chunk was conditioned on (s, same clock as ``now_s``)."""
    joint_names: Sequence[str]
    """Names of the position columns, in any order (6 arm joints + the gripper joint)."""
    times_from_start_s: Sequence[float]
    """Offset of each point after ``stamp_s`` (s), strictly increasing."""
    positions: Sequence[Sequence[float]]
    """``positions[k][j]``: rad for arm joints, opening in m for the gripper joint."""


class RejectReason(enum.Enum):
    """Why a chunk was not executed; ``value`` is the counter key in diagnostics."""

    EMPTY = "empty"
    UNKNOWN_JOINT = "unknown_joint"
    MISSING_JOINT = "missing_joint"
    DUPLICATE_JOINT = "duplicate_joint"
    WRONG_POSITION_COUNT = "wrong_position_count"
    NON_FINITE = "non_finite"
    NON_INCREASING_TIME = "non_increasing_time"
    STAMP_TOO_OLD = "stamp_too_old"
    STAMP_IN_FUTURE = "stamp_in_future"
    SAME_STAMP = "same_stamp"
    """Conditioned on the observation of the chunk in execution: a policy ticking faster
    than new observations arrive. Nothing new to execute; not an error."""
    NOT_NEWER = "not_newer"
    NO_FUTURE_POINTS = "no_future_points"
    OUT_OF_LIMITS = "out_of_limits"
    """A point leaves the joint limits (or the gripper's range) by more than the
    tolerance: the whole chunk is refused, as a trajectory controller refuses it."""
    STATE_UNAVAILABLE = "state_unavailable"
    BEFORE_PATH_ABORT = "before_path_abort"


class ChunkRejected(Exception):
    """A chunk failed validation; the current motion is unaffected."""

    def __init__(self, reason: RejectReason, detail: str):
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True)
class ValidChunk:
    """A chunk mapped to the configured joint order, times absolute."""

    stamp_s: float
    times_s: tuple[float, ...]
    """Absolute time of each point (s)."""
    arm: tuple[tuple[float, ...], ...]
    """``arm[k][j]`` in configured ``joint_names`` order (rad)."""
    gripper: tuple[float, ...]
    """Gripper opening per point (m)."""


def validate_chunk(chunk: ActionChunk, now_s: float, joint_names: Sequence[str],
                   gripper_joint: str, max_age_s: float, future_tolerance_s: float) -> ValidChunk:
    """Check ``chunk`` and map it to ``joint_names`` + ``gripper_joint``; raise ``ChunkRejected``.

    Checks, in this order: empty, joint names (duplicate, unknown, missing),
    counts, finiteness, strictly increasing ``time_from_start``, stamp age
    (``now_s - stamp_s > max_age_s``) and stamps ahead of ``now_s`` by more
    than ``future_tolerance_s``. Points in the past are *not* dropped here.
    """
    names = list(chunk.joint_names)
    times = list(chunk.times_from_start_s)
    rows = list(chunk.positions)
    if not rows or not times:
        raise ChunkRejected(RejectReason.EMPTY, "chunk has no points")
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ChunkRejected(RejectReason.DUPLICATE_JOINT, f"joint names repeated: {dup}")
    expected = list(joint_names) + [gripper_joint]
    unknown = [n for n in names if n not in expected]
    if unknown:
        raise ChunkRejected(RejectReason.UNKNOWN_JOINT, f"unknown joint names {unknown}")
    missing = [n for n in expected if n not in names]
    if missing:
        raise ChunkRejected(RejectReason.MISSING_JOINT, f"missing joint names {missing}")
    if len(times) != len(rows):
        raise ChunkRejected(RejectReason.WRONG_POSITION_COUNT,
                            f"{len(times)} times_from_start for {len(rows)} points")
    for k, row in enumerate(rows):
        if len(row) != len(names):
            raise ChunkRejected(RejectReason.WRONG_POSITION_COUNT,
                                f"point {k} has {len(row)} positions for {len(names)} joints")
    try:
        stamp = float(chunk.stamp_s)
        times = [float(t) for t in times]
        rows = [[float(x) for x in row] for row in rows]
    except (TypeError, ValueError) as exc:
        raise ChunkRejected(RejectReason.NON_FINITE, f"non-numeric value: {exc}") from None
    if not math.isfinite(stamp) or not all(map(math.isfinite, times)):
        raise ChunkRejected(RejectReason.NON_FINITE, "stamp or time_from_start is NaN/inf")
    for k, row in enumerate(rows):
        if not all(map(math.isfinite, row)):
            raise ChunkRejected(RejectReason.NON_FINITE, f"point {k} has a NaN/inf position")
    for k in range(1, len(times)):
        if not times[k] > times[k - 1]:
            raise ChunkRejected(RejectReason.NON_INCREASING_TIME,
                                f"time_from_start[{k}] = {times[k]} <= [{k - 1}] = {times[k - 1]}")
    age = now_s - stamp
    if age > max_age_s:
        raise ChunkRejected(RejectReason.STAMP_TOO_OLD,
                            f"stamp is {age:.3f} s old (max_chunk_age_s {max_age_s})")
    if -age > future_tolerance_s:
        raise ChunkRejected(RejectReason.STAMP_IN_FUTURE,
                            f"stamp is {-age:.3f} s in the future "
                            f"(future_tolerance_s {future_tolerance_s})")
    columns = [names.index(n) for n in joint_names]
    g = names.index(gripper_joint)
    return ValidChunk(
        stamp_s=stamp,
        times_s=tuple(stamp + t for t in times),
        arm=tuple(tuple(row[c] for c in columns) for row in rows),
        gripper=tuple(row[g] for row in rows),
    )


def check_chunk_limits(valid: ValidChunk, joint_names: Sequence[str], lower: Sequence[float],
                       upper: Sequence[float], tolerance_rad: float, gripper_min_m: float,
                       gripper_max_m: float, gripper_tolerance_m: float) -> None:
    """Raise ``ChunkRejected(OUT_OF_LIMITS)`` naming the first point and joint that lies
    more than the tolerance outside its limits."""
    for k, row in enumerate(valid.arm):
        for name, x, lo, hi in zip(joint_names, row, lower, upper, strict=True):
            if x < lo - tolerance_rad or x > hi + tolerance_rad:
                raise ChunkRejected(
                    RejectReason.OUT_OF_LIMITS,
                    f"point {k}: {name} = {x:.4g} rad is outside its limits [{lo:.4g}, "
                    f"{hi:.4g}] (chunk_limit_tolerance {tolerance_rad:g} rad)")
    for k, g in enumerate(valid.gripper):
        if g < gripper_min_m - gripper_tolerance_m or g > gripper_max_m + gripper_tolerance_m:
            raise ChunkRejected(
                RejectReason.OUT_OF_LIMITS,
                f"point {k}: gripper opening {g:.4g} m is outside [{gripper_min_m:g}, "
                f"{gripper_max_m:g}] (gripper_limit_tolerance {gripper_tolerance_m:g} m)")
