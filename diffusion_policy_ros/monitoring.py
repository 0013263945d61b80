"""Pure helpers for node health reporting: rates, latency percentiles, throttled reasons."""

from __future__ import annotations

import collections

import numpy as np


class RollingStats:
    """Percentiles of the last ``window`` samples (e.g. processing time, skew).

    One thread may add while another reads: a read works on one copy of the window,
    taken in a single call that holds the GIL.
    """

    def __init__(self, window: int = 300):
        self._values: collections.deque[float] = collections.deque(maxlen=window)

    def add(self, value: float) -> None:
        self._values.append(float(value))

    def __len__(self) -> int:
        return len(self._values)

    def percentile(self, q: float) -> float:
        values = list(self._values)
        return float(np.percentile(values, q)) if values else float("nan")

    def max(self) -> float:
        values = list(self._values)
        return max(values) if values else float("nan")


class RateMeter:
    """Event rate (Hz) over a sliding time window of one clock (s).

    The clock may be a ROS clock on sim time, which jumps back when a simulation or
    a bag restarts: a time before the last event starts the count afresh.
    """

    def __init__(self, window_s: float = 2.0):
        self.window_s = window_s
        self._times: collections.deque[float] = collections.deque()
        self.total = 0

    def tick(self, now_s: float) -> None:
        if self._times and now_s < self._times[-1]:
            self._times.clear()
        self._times.append(now_s)
        self.total += 1

    def rate_hz(self, now_s: float) -> float:
        if self._times and now_s < self._times[-1]:
            self._times.clear()
        while self._times and self._times[0] < now_s - self.window_s:
            self._times.popleft()
        return len(self._times) / self.window_s


class ThrottledReasons:
    """Counts events by reason and says when each reason may be logged again.

    rclpy's ``throttle_duration_sec`` throttles per call site, so one site that
    reports many reasons would hide all but the first; this throttles per reason.
    """

    def __init__(self, period_s: float = 2.0):
        self.period_s = period_s
        self.counts: collections.Counter[str] = collections.Counter()
        self._last_log: dict[str, float] = {}

    def record(self, reason: str, now_s: float) -> bool:
        """Count one ``reason``; True when it should be logged now."""
        self.counts[reason] += 1
        last = self._last_log.get(reason)
        if last is None or now_s - last >= self.period_s:
            self._last_log[reason] = now_s
            return True
        return False
