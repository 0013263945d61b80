"""``FrameRateSchedule``: which frames of a camera stream to use, about ``rate_hz`` a second.

Two consumers take a 30 Hz camera at a lower rate: ``policy_node`` starts an action
chunk on the frame that completes its observation (a chunk started on a timer runs at
a random phase to the camera, so its newest frame is up to one camera period older
than it need be), and ``rgbd_sync_node`` turns only the frames the policy will use
into observations (``output_rate_hz``). Both decide on the frames' own stamps (sim
time under ``use_sim_time``, the sensor's clock on a robot or a bag), so the rate
holds whatever the camera's period, and two schedules at the same rate in a row pick
the same frames.

A frame is due when its stamp reaches the next due time less half a frame interval
(the median of the last few intervals between consecutive stamps, so a dropped frame
does not widen it); the next due time then moves on by one period, or, when the due
frame was missing and a later one was taken, restarts one period after that frame
(two taken frames are never closer than a period less a frame interval). A stamp that
goes back (a bag loop, a simulated reset on its own clock) restarts the schedule.
"""

from __future__ import annotations

import collections
import statistics

#: Frame intervals the tolerance is the median of.
INTERVALS_KEPT = 8


class FrameRateSchedule:
    """``on_frame(stamp_ns)`` says whether a frame is due (to be used) at ``rate_hz``."""

    def __init__(self, rate_hz: float):
        if not rate_hz > 0:
            raise ValueError(f"rate_hz must be positive, got {rate_hz}")
        self.period_ns = round(1e9 / rate_hz)
        self._next_due_ns: int | None = None
        self._last_frame_ns: int | None = None
        self._intervals_ns: collections.deque[int] = collections.deque(maxlen=INTERVALS_KEPT)

    def restart(self) -> None:
        """The next frame is due (a new task, a new stream)."""
        self._next_due_ns = None
        self._last_frame_ns = None

    def would_take(self, stamp_ns: int) -> bool:
        """What ``on_frame(stamp_ns)`` would say now, without taking the frame: for work
        that can start on part of a frame (its colour image) before the rest of it
        decides. Frames taken in between can change the answer."""
        last = self._last_frame_ns
        if last is not None and stamp_ns <= last:
            return stamp_ns != last
        intervals = list(self._intervals_ns)
        if last is not None and stamp_ns - last < self.period_ns:
            intervals = [*intervals, stamp_ns - last][-INTERVALS_KEPT:]
        due = self._next_due_ns
        return due is None or stamp_ns >= due - self._tolerance_ns(intervals)

    def on_frame(self, stamp_ns: int) -> bool:
        last = self._last_frame_ns
        if last is not None and stamp_ns <= last:
            if stamp_ns == last:
                return False  # the same frame again
            self.restart()  # the stamps went back: a new stream
        elif last is not None and stamp_ns - last < self.period_ns:
            self._intervals_ns.append(stamp_ns - last)  # a gap is no frame interval
        self._last_frame_ns = stamp_ns
        due, tolerance_ns = self._next_due_ns, self._tolerance_ns(self._intervals_ns)
        if due is not None and stamp_ns < due - tolerance_ns:
            return False
        if due is None or stamp_ns - due > tolerance_ns:
            self._next_due_ns = stamp_ns + self.period_ns  # frames were missing
        else:
            self._next_due_ns = due + self.period_ns
        return True

    def _tolerance_ns(self, intervals_ns) -> int:
        """Half a frame interval (at most half a period): the frame nearest the due time
        is taken, whether it comes a little before or after it, and a stream already at
        the rate keeps every frame."""
        if not intervals_ns:
            return 0
        return min(int(statistics.median(intervals_ns)), self.period_ns) // 2
