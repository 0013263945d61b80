"""Reference limiting: the last guard between any chunk stream and the PD law.

``ReferenceLimiter`` is a second-order (position + velocity state) tracking
filter. Each step it picks the velocity that would put the reference on the
target *now* (target velocity plus the remaining position error over the
step, i.e. exact pass-through of a smooth target), but never faster than lets
it brake onto the target with ``braking_fraction`` of the acceleration limit,
never faster than ``velocity_limits``, and never so fast towards a position
limit that it could not stop inside it. It then moves its velocity towards that
choice by at most ``acceleration_limits * dt``. Consequences, for *any* target
(jumps, NaN-free garbage, limits exceeded):

* position stays within ``[lower + margin, upper - margin]``,
* ``|velocity| <= velocity_limits``, ``|acceleration| <= acceleration_limits``
  (position and velocity are continuous),
* a target that respects the limits is reproduced exactly (no lag).

``hold`` brakes with ``braking_fraction`` of the acceleration limit and stops
where it stops. ``GripperRateLimiter`` clamps the opening and limits its rate;
a first-order limiter cannot overshoot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def braking_distance(speed: float, decel: float, dt: float) -> float:
    """Distance covered by steps at ``speed``, ``speed - decel*dt``, ... down to rest.

    Semi-implicit Euler: every step moves by its new velocity times ``dt``, so a
    step at ``speed`` is taken before braking starts. With ``speed = decel*dt*(n + f)``
    (n whole, 0 <= f < 1) that is ``decel*dt^2 * (n + 1) * (n/2 + f)``.
    """
    if speed <= 0.0:
        return 0.0
    dv = decel * dt
    n = math.floor(speed / dv)
    return dv * dt * (n + 1) * (0.5 * n + speed / dv - n)


def stopping_speed(distance: float, decel: float, dt: float) -> float:
    """Largest speed from which steps of ``decel * dt`` stop within ``distance``.

    Exact inverse of ``braking_distance`` (piecewise linear in the speed). The
    continuous ``w^2 / (2 decel) + w dt / 2`` underestimates the stepped distance by
    up to ``decel dt^2 / 8``, which let the reference reach a position limit with
    speed left and be clamped there by more than the acceleration limit allows.
    """
    if distance <= 0.0:
        return 0.0
    dv = decel * dt
    # Whole braking steps n with braking_distance(n * dv) = dv*dt*n(n+1)/2 <= distance.
    n = math.floor((math.sqrt(1.0 + 8.0 * distance / (dv * dt)) - 1.0) / 2.0)
    if dv * dt * (n + 1) * (n + 2) / 2 <= distance:  # sqrt rounded down across a step
        n += 1
    return n * dv + (distance - dv * dt * n * (n + 1) / 2) / ((n + 1) * dt)


class ReferenceLimiter:
    """Per-joint position/velocity/acceleration-limited reference (plain floats)."""

    __slots__ = ("lower", "upper", "vmax", "amax", "abrake", "position", "velocity",
                 "acceleration", "n", "saturated")

    def __init__(self, lower: Sequence[float], upper: Sequence[float],
                 velocity_limits: Sequence[float], acceleration_limits: Sequence[float],
                 braking_fraction: float):
        self.n = len(lower)
        self.lower = [float(x) for x in lower]
        self.upper = [float(x) for x in upper]
        self.vmax = [float(x) for x in velocity_limits]
        self.amax = [float(x) for x in acceleration_limits]
        self.abrake = [braking_fraction * a for a in self.amax]
        self.position = [0.0] * self.n
        self.velocity = [0.0] * self.n
        self.acceleration = [0.0] * self.n
        self.saturated = False
        """Last step changed the requested motion (limit or acceleration bound active)."""

    def reset(self, position: Sequence[float], velocity: Sequence[float] | None = None,
              dt: float | None = None) -> None:
        """Start from ``position`` (clamped into limits), ``velocity`` clamped, at rest if None.

        With the step period ``dt`` the velocity is also clamped to what can still brake
        inside the position limits: a measured arm moving fast towards a nearby limit
        would otherwise leave the reference only the last-resort clamp at the limit,
        beyond the acceleration limit (hypothesis found it after a push and resync).
        """
        self.position = [min(hi, max(lo, float(x)))
                         for x, lo, hi in zip(position, self.lower, self.upper, strict=True)]
        if velocity is None:
            self.velocity = [0.0] * self.n
        else:
            self.velocity = [min(vm, max(-vm, float(v)))
                             for v, vm in zip(velocity, self.vmax, strict=True)]
            if dt is not None:
                self.velocity = [
                    min(stopping_speed(hi - x, ab, dt), max(-stopping_speed(x - lo, ab, dt), v))
                    for x, v, lo, hi, ab in zip(self.position, self.velocity, self.lower,
                                                self.upper, self.abrake, strict=True)]
        self.acceleration = [0.0] * self.n

    def step(self, dt: float, target_pos: Sequence[float], target_vel: Sequence[float]) -> None:
        """Advance by ``dt`` (> 0) towards the target state at the end of the step."""
        pos, vel, acc = self.position, self.velocity, self.acceleration
        lower, upper, vmax, amax, abrake = self.lower, self.upper, self.vmax, self.amax, self.abrake
        inv_dt = 1.0 / dt
        saturated = False
        for j in range(self.n):
            x = pos[j]
            v = vel[j]
            lo = lower[j]
            hi = upper[j]
            p_t = target_pos[j]
            if p_t > hi:
                p_t = hi
            elif p_t < lo:
                p_t = lo
            v_t = target_vel[j]
            ab = abrake[j]
            # Error left if the reference moved at the target's velocity this step.
            e = p_t - x - v_t * dt
            w = e * inv_dt
            if w > 0.0:
                w_max = stopping_speed(e, ab, dt)
                if w > w_max:
                    w = w_max
                    saturated = True
            elif w < 0.0:
                w_max = stopping_speed(-e, ab, dt)
                if w < -w_max:
                    w = -w_max
                    saturated = True
            v_des = v_t + w
            # Speed limit and stopping room in front of the position limits.
            # Skip the inverse where full speed can brake in time (distance bound:
            # braking_distance(w) <= w^2 / 2a + w dt / 2 + a dt^2 / 8).
            vm = vmax[j]
            room = vm * (0.5 * vm / ab + 0.5 * dt) + 0.125 * ab * dt * dt
            v_hi = vm if hi - x >= room else min(vm, stopping_speed(hi - x, ab, dt))
            v_lo = -vm if x - lo >= room else -min(vm, stopping_speed(x - lo, ab, dt))
            if v_des > v_hi:
                v_des = v_hi
                saturated = True
            elif v_des < v_lo:
                v_des = v_lo
                saturated = True
            dv_max = amax[j] * dt
            dv = v_des - v
            if dv > dv_max:
                dv = dv_max
                saturated = True
            elif dv < -dv_max:
                dv = -dv_max
                saturated = True
            v_new = v + dv
            x_new = x + v_new * dt
            if x_new > hi or x_new < lo:
                # Last resort (should not trigger): stay inside, velocity consistent.
                x_new = hi if x_new > hi else lo
                v_new = (x_new - x) * inv_dt
                saturated = True
            acc[j] = (v_new - v) * inv_dt
            vel[j] = v_new
            pos[j] = x_new
        self.saturated = saturated

    def hold(self, dt: float) -> bool:
        """Brake towards rest within the limits; True once every joint is at rest."""
        pos, vel, acc = self.position, self.velocity, self.acceleration
        inv_dt = 1.0 / dt
        at_rest = True
        for j in range(self.n):
            v = vel[j]
            if v == 0.0:
                acc[j] = 0.0
                continue
            dv = self.abrake[j] * dt
            v_new = 0.0 if abs(v) <= dv else v - math.copysign(dv, v)
            x_new = pos[j] + v_new * dt
            lo, hi = self.lower[j], self.upper[j]
            if x_new > hi or x_new < lo:
                x_new = hi if x_new > hi else lo
                v_new = (x_new - pos[j]) * inv_dt
            acc[j] = (v_new - v) * inv_dt
            vel[j] = v_new
            pos[j] = x_new
            at_rest = at_rest and v_new == 0.0
        return at_rest


class MeasuredStateLimits:
    """Effort bounds from the *measured* joint state: the arm itself, not only its
    reference, stays under its velocity limits and inside its position limits.

    A limited reference does not bound the arm: an arm that lags a reference it cannot
    follow (efforts saturated, a far step) builds a position error that the PD law then
    closes faster than the reference moved, and can coast past a limit the reference
    stopped short of. The bounds follow the soft-limit law of ros2_control's
    ``joint_limits`` for effort interfaces: a velocity bound per joint and direction,
    and an effort that may only push the measured speed towards it,
    ``kd (v_bound - qd)``. With the PD law's own ``kd`` this is the PD law written as
    ``kd (v_cmd - qd)``, ``v_cmd = qd_ref + kp / kd (q_ref - q)``, with ``v_cmd``
    clamped to the bounds: no new gain to tune, and no effect while the arm tracks
    (``v_cmd`` within the bounds). Unlike ros2_control's linear position gain, the
    velocity bound in front of a position limit is the speed that can still brake
    within it at the acceleration limit, ``sqrt(2 a d)``; beyond the limit it points
    back inside.
    """

    __slots__ = ("lower", "upper", "vmax", "two_a", "kd", "n")

    def __init__(self, lower: Sequence[float], upper: Sequence[float],
                 velocity_limits: Sequence[float], acceleration_limits: Sequence[float],
                 kd: Sequence[float]):
        self.n = len(lower)
        self.lower = [float(x) for x in lower]
        self.upper = [float(x) for x in upper]
        self.vmax = [float(x) for x in velocity_limits]
        self.two_a = [2.0 * float(a) for a in acceleration_limits]
        self.kd = [float(k) for k in kd]

    def velocity_bounds(self, j: int, q: float) -> tuple[float, float]:
        """Lowest and highest speed of joint ``j`` at position ``q`` (rad/s)."""
        vm, two_a = self.vmax[j], self.two_a[j]
        room_up = self.upper[j] - q
        room_down = q - self.lower[j]
        hi = math.sqrt(two_a * room_up) if room_up >= 0.0 else -math.sqrt(-two_a * room_up)
        lo = -math.sqrt(two_a * room_down) if room_down >= 0.0 else math.sqrt(-two_a * room_down)
        # Within +-vm both: beyond a limit both bounds point back inside, at most at vm.
        return min(vm, max(-vm, lo)), max(-vm, min(vm, hi))

    def bound(self, effort: list[float], q: Sequence[float], qd: Sequence[float],
              effort_limits: Sequence[float],
              feedforward: Sequence[float] | None = None) -> bool:
        """Clamp ``effort`` (N m, in place, already within ``+-effort_limits``) to what
        keeps the measured state in bounds; True when any joint was clamped.

        ``feedforward`` (the part of ``effort`` that compensates gravity or the
        reference's acceleration) passes: only the feedback may not push past a bound.
        """
        clamped = False
        for j in range(self.n):
            lo, hi = self.velocity_bounds(j, q[j])
            lim = effort_limits[j]
            ff = feedforward[j] if feedforward is not None else 0.0
            e = effort[j]
            e_hi = min(lim, max(-lim, self.kd[j] * (hi - qd[j]) + ff))
            if e > e_hi:
                effort[j] = e = e_hi
                clamped = True
            e_lo = min(lim, max(-lim, self.kd[j] * (lo - qd[j]) + ff))
            if e < e_lo:
                effort[j] = e_lo
                clamped = True
        return clamped


class GripperRateLimiter:
    """Gripper opening clamped to ``[min, max]`` and moved at most ``rate * dt`` per step."""

    __slots__ = ("low", "high", "rate", "opening")

    def __init__(self, low: float, high: float, rate: float):
        self.low = low
        self.high = high
        self.rate = rate
        self.opening: float | None = None

    def reset(self, opening: float | None) -> None:
        self.opening = None if opening is None else min(self.high, max(self.low, opening))

    def step(self, dt: float, target: float) -> float:
        target = min(self.high, max(self.low, target))
        if self.opening is None:
            self.opening = target
            return target
        step = self.rate * dt
        delta = target - self.opening
        if delta > step:
            delta = step
        elif delta < -step:
            delta = -step
        self.opening = min(self.high, max(self.low, self.opening + delta))
        return self.opening


def saturate(values: Sequence[float], limits: Sequence[float]) -> list[float]:
    """Clamp each value to ``+-limit``."""
    return [min(lim, max(-lim, x)) for x, lim in zip(values, limits, strict=True)]
