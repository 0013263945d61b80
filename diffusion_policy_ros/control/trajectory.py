"""Continuous-time reference trajectories built from 10 Hz waypoints.

* ``QuinticSpline``: piecewise quintic Hermite through knots with position,
  velocity and acceleration given at every knot, so the result is continuous
  in position, velocity *and* acceleration (C2). Knot derivatives come from
  ``knot_derivatives`` (3-point parabola fits, exact for quadratics, allowed
  non-uniform spacing); the last knot gets zero velocity and acceleration so
  the trajectory comes to rest on its final waypoint and holds it afterwards.
  Before its first knot the spline is extended by its second-order Taylor
  polynomial (continuous to C2); a cross-fade starting just before the first
  future waypoint uses that stretch.
* ``PiecewiseLinear``: the gripper channel. Linear interpolation never leaves
  the range of its waypoints, so the gripper reference cannot overshoot.
* ``WaypointTrajectory`` (arm spline + gripper line) and ``CrossFade`` (two
  trajectories mixed with a quintic smoothstep whose first and second
  derivatives vanish at both ends, so the mix is C2 when both parts are).

Every trajectory answers ``sample(t) -> (positions, velocities)`` on the hot
path (plain Python floats: with 6 channels this is several times faster than
numpy, whose per-call overhead dominates arrays this small), ``sample3`` with
accelerations for analysis and tests, and ``gripper(t)``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np


def knot_derivatives(times: Sequence[float], values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Velocity and acceleration at each knot from 3-point parabola fits.

    ``values`` is ``(n_knots, n_channels)``. Interior knots use the parabola
    through their neighbours; the first knot uses the parabola through the
    first three knots (a straight line with two knots); the last knot gets
    zero velocity and acceleration (the trajectory settles on it).
    """
    t = np.asarray(times, dtype=float)
    p = np.asarray(values, dtype=float)
    n = len(t)
    vel = np.zeros_like(p)
    acc = np.zeros_like(p)
    if n == 2:
        vel[0] = (p[1] - p[0]) / (t[1] - t[0])
    elif n >= 3:
        h0 = (t[1:-1] - t[:-2])[:, None]
        h1 = (t[2:] - t[1:-1])[:, None]
        pm, p0, pp = p[:-2], p[1:-1], p[2:]
        vel[1:-1] = (-h1 / (h0 * (h0 + h1)) * pm + (h1 - h0) / (h0 * h1) * p0
                     + h0 / (h1 * (h0 + h1)) * pp)
        acc[1:-1] = 2.0 * (pm / (h0 * (h0 + h1)) - p0 / (h0 * h1) + pp / (h1 * (h0 + h1)))
        a0, b0 = h0[0], h1[0]
        vel[0] = (-(2 * a0 + b0) / (a0 * (a0 + b0)) * p[0] + (a0 + b0) / (a0 * b0) * p[1]
                  - a0 / (b0 * (a0 + b0)) * p[2])
        acc[0] = acc[1]
    return vel, acc


def quintic_coefficients(duration: float | np.ndarray, p0, v0, a0, p1, v1, a1):
    """Coefficients ``c0..c5`` (in local time) of the quintic matching both end states.

    Works elementwise on numpy arrays (one column per channel).
    """
    t = duration
    dp = p1 - p0
    c3 = (20 * dp - (8 * v1 + 12 * v0) * t - (3 * a0 - a1) * t * t) / (2 * t ** 3)
    c4 = (-30 * dp + (14 * v1 + 16 * v0) * t + (3 * a0 - 2 * a1) * t * t) / (2 * t ** 4)
    c5 = (12 * dp - 6 * (v1 + v0) * t + (a1 - a0) * t * t) / (2 * t ** 5)
    return p0, v0, a0 / 2.0, c3, c4, c5


class QuinticSpline:
    """Piecewise quintic Hermite (C2) through knots at absolute times."""

    __slots__ = ("times", "_coefs", "_first", "_last_p", "n_channels")

    def __init__(self, times: Sequence[float], pos, vel, acc):
        t = np.asarray(times, dtype=float)
        p = np.atleast_2d(np.asarray(pos, dtype=float))
        v = np.atleast_2d(np.asarray(vel, dtype=float))
        a = np.atleast_2d(np.asarray(acc, dtype=float))
        if len(t) < 1 or p.shape[0] != len(t) or v.shape != p.shape or a.shape != p.shape:
            raise ValueError(f"knot arrays disagree: times {t.shape}, pos {p.shape}, "
                             f"vel {v.shape}, acc {a.shape}")
        if np.any(np.diff(t) <= 0):
            raise ValueError("knot times must increase strictly")
        self.times = t.tolist()
        self.n_channels = p.shape[1]
        d = np.diff(t)[:, None]
        c0, c1, c2, c3, c4, c5 = quintic_coefficients(d, p[:-1], v[:-1], a[:-1],
                                                      p[1:], v[1:], a[1:])
        # Per segment, per channel: (c0, c1, c2, c3, c4, c5, 2c2, 3c3, 4c4, 5c5).
        stack = np.stack([c0, c1, c2, c3, c4, c5, 2 * c2, 3 * c3, 4 * c4, 5 * c5], axis=-1)
        self._coefs = [[tuple(ch) for ch in seg] for seg in stack.tolist()]
        self._first = (p[0].tolist(), v[0].tolist(), a[0].tolist())
        self._last_p = p[-1].tolist()

    @classmethod
    def through_waypoints(cls, times: Sequence[float], values) -> QuinticSpline:
        """Spline through waypoints with ``knot_derivatives`` (settles on the last one)."""
        p = np.atleast_2d(np.asarray(values, dtype=float))
        vel, acc = knot_derivatives(times, p)
        return cls(times, p, vel, acc)

    @property
    def start_s(self) -> float:
        return self.times[0]

    @property
    def end_s(self) -> float:
        return self.times[-1]

    def sample(self, t: float) -> tuple[list[float], list[float]]:
        times = self.times
        if t >= times[-1]:
            return list(self._last_p), [0.0] * self.n_channels
        if t < times[0]:
            p0, v0, a0 = self._first
            d = t - times[0]
            return ([p + d * (v + 0.5 * d * a) for p, v, a in zip(p0, v0, a0, strict=True)],
                    [v + d * a for v, a in zip(v0, a0, strict=True)])
        s = bisect.bisect_right(times, t) - 1
        d = t - times[s]
        pos = []
        vel = []
        for c0, c1, c2, c3, c4, c5, e2, e3, e4, e5 in self._coefs[s]:
            pos.append(c0 + d * (c1 + d * (c2 + d * (c3 + d * (c4 + d * c5)))))
            vel.append(c1 + d * (e2 + d * (e3 + d * (e4 + d * e5))))
        return pos, vel

    def sample3(self, t: float) -> tuple[list[float], list[float], list[float]]:
        """Positions, velocities and accelerations (analysis and tests)."""
        times = self.times
        n = self.n_channels
        if t >= times[-1]:
            return list(self._last_p), [0.0] * n, [0.0] * n
        if t < times[0]:
            p, v = self.sample(t)
            return p, v, list(self._first[2])
        s = bisect.bisect_right(times, t) - 1
        d = t - times[s]
        pos, vel = self.sample(t)
        acc = [2 * c2 + d * (6 * c3 + d * (12 * c4 + d * 20 * c5))
               for _c0, _c1, c2, c3, c4, c5, *_ in self._coefs[s]]
        return pos, vel, acc


class PiecewiseLinear:
    """Scalar linear interpolation through waypoints; constant outside them."""

    __slots__ = ("times", "values")

    def __init__(self, times: Sequence[float], values: Sequence[float]):
        self.times = [float(t) for t in times]
        self.values = [float(v) for v in values]
        if not self.times or len(self.times) != len(self.values):
            raise ValueError("need as many values as times (at least one)")

    def __call__(self, t: float) -> float:
        times = self.times
        if t <= times[0]:
            return self.values[0]
        if t >= times[-1]:
            return self.values[-1]
        s = bisect.bisect_right(times, t) - 1
        u = (t - times[s]) / (times[s + 1] - times[s])
        return self.values[s] + u * (self.values[s + 1] - self.values[s])


class WaypointTrajectory:
    """Arm spline plus gripper line: the trajectory of one (possibly blended) chunk."""

    __slots__ = ("arm", "gripper", "stamp_s")

    def __init__(self, arm: QuinticSpline, gripper: PiecewiseLinear, stamp_s: float):
        self.arm = arm
        self.gripper = gripper
        self.stamp_s = stamp_s

    @property
    def end_s(self) -> float:
        return max(self.arm.end_s, self.gripper.times[-1])

    def sample(self, t: float) -> tuple[list[float], list[float]]:
        return self.arm.sample(t)

    def sample3(self, t: float):
        return self.arm.sample3(t)

    def gripper_at(self, t: float) -> float:
        return self.gripper(t)

    def pruned(self, t: float) -> WaypointTrajectory:
        return self

    @property
    def depth(self) -> int:
        return 1


def smoothstep5(u: float) -> tuple[float, float, float]:
    """Quintic smoothstep on [0, 1] and its first two derivatives (all flat at both ends)."""
    if u <= 0.0:
        return 0.0, 0.0, 0.0
    if u >= 1.0:
        return 1.0, 0.0, 0.0
    w = 1.0 - u
    return (u * u * u * (10.0 + u * (-15.0 + 6.0 * u)), 30.0 * u * u * w * w,
            60.0 * u * w * (1.0 - 2.0 * u))


class CrossFade:
    """``(1 - s) old + s new`` with ``s`` a quintic smoothstep over ``[start, start + window]``."""

    __slots__ = ("old", "new", "start_s", "window_s")

    def __init__(self, old, new, start_s: float, window_s: float):
        self.old = old
        self.new = new
        self.start_s = start_s
        self.window_s = window_s

    @property
    def end_s(self) -> float:
        return self.new.end_s

    @property
    def stamp_s(self) -> float:
        return self.new.stamp_s

    @property
    def fade_end_s(self) -> float:
        return self.start_s + self.window_s

    @property
    def depth(self) -> int:
        return 1 + max(self.old.depth, self.new.depth)

    def pruned(self, t: float):
        """The equivalent trajectory from ``t`` on, with finished fades removed."""
        if t >= self.start_s + self.window_s:
            return self.new.pruned(t)
        self.old = self.old.pruned(t)
        return self

    def sample(self, t: float) -> tuple[list[float], list[float]]:
        u = (t - self.start_s) / self.window_s
        if u >= 1.0:
            return self.new.sample(t)
        if u <= 0.0:
            return self.old.sample(t)
        s, ds, _ = smoothstep5(u)
        ds /= self.window_s
        po, vo = self.old.sample(t)
        pn, vn = self.new.sample(t)
        r = 1.0 - s
        pos = [r * a + s * b for a, b in zip(po, pn, strict=True)]
        vel = [r * va + s * vb + ds * (b - a) for a, b, va, vb in zip(po, pn, vo, vn, strict=True)]
        return pos, vel

    def sample3(self, t: float):
        u = (t - self.start_s) / self.window_s
        if u >= 1.0:
            return self.new.sample3(t)
        if u <= 0.0:
            return self.old.sample3(t)
        s, ds, dds = smoothstep5(u)
        ds /= self.window_s
        dds /= self.window_s ** 2
        po, vo, ao = self.old.sample3(t)
        pn, vn, an = self.new.sample3(t)
        r = 1.0 - s
        pos = [r * a + s * b for a, b in zip(po, pn, strict=True)]
        vel = [r * va + s * vb + ds * (b - a) for a, b, va, vb in zip(po, pn, vo, vn, strict=True)]
        acc = [r * aa + s * ab + 2 * ds * (vb - va) + dds * (b - a)
               for a, b, va, vb, aa, ab in zip(po, pn, vo, vn, ao, an, strict=True)]
        return pos, vel, acc

    def gripper_at(self, t: float) -> float:
        u = (t - self.start_s) / self.window_s
        if u >= 1.0:
            return self.new.gripper_at(t)
        if u <= 0.0:
            return self.old.gripper_at(t)
        s = smoothstep5(u)[0]
        return (1.0 - s) * self.old.gripper_at(t) + s * self.new.gripper_at(t)
