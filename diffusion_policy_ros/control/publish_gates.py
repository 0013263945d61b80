"""When a node's periodic outputs go out: fixed-rate topics and held commands.

Every message costs the sender a publish and each subscriber a callback; on two cores
shared with the simulator, the policy and the camera pipeline, that is what limits the
whole graph's pace. The tracker's efforts go out every tick; these gates thin its gripper
command and reference, and put sim_node's ``joint_states`` on their sim-time grid.
"""

from __future__ import annotations

import math


class HeldCommandGate:
    """Send a command its receiver holds (a position-controlled gripper keeps its last
    opening) when it changes, and unchanged at least every ``keepalive_s`` so a late
    or restarted receiver gets it; ``keepalive_s`` 0 sends every time. Times in s of one
    clock; a clock that went back (a replayed bag restarting) sends at once."""

    def __init__(self, keepalive_s: float):
        if keepalive_s < 0:
            raise ValueError(f"keepalive_s must be >= 0, got {keepalive_s}")
        self.keepalive_s = keepalive_s
        self._sent: float | None = None
        self._sent_at_s = 0.0

    def due(self, value: float, now_s: float) -> bool:
        if (self._sent is None or value != self._sent or not self.keepalive_s
                or now_s - self._sent_at_s >= self.keepalive_s - 1e-9 or now_s < self._sent_at_s):
            self._sent, self._sent_at_s = value, now_s
            return True
        return False


class RateGate:
    """At most one message every ``1 / rate_hz`` s of one clock, on a fixed grid so the
    rate holds however the ticks fall; a clock that went back starts afresh."""

    def __init__(self, rate_hz: float):
        if rate_hz <= 0:
            raise ValueError(f"rate_hz must be > 0, got {rate_hz}")
        self.period_s = 1.0 / rate_hz
        self._next_s: float | None = None

    def due(self, now_s: float) -> bool:
        # 1e-9 s: a time on the grid, up to rounding, is due.
        if self._next_s is not None and \
                self._next_s - self.period_s - 1e-9 <= now_s < self._next_s - 1e-9:
            return False
        self._next_s = (math.floor(now_s / self.period_s + 1e-9) + 1) * self.period_s
        return True

    def restart(self) -> None:
        """The next call is due whatever the time (a new episode)."""
        self._next_s = None
