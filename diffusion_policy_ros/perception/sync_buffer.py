"""Timestamp sync of the Kinect colour and depth streams.

Each colour frame pairs with the pending depth frame nearest in stamp within
``max_skew_s``; the pair carries the colour stamp. A pair is emitted as soon
as a partner is present: with 30 Hz streams (33 ms apart) and a skew bound
below half the frame period the partner is unique, so waiting would only add
latency. Output stamps are strictly increasing.

Every frame that does not end up in a pair is counted under one reason:

- ``duplicate_stamp``: a stamp already seen on that stream,
- ``too_old``: older than ``max_age_s`` behind the newest stamp seen,
- ``late``: arrives after a newer pair was already emitted,
- ``unmatched_color`` / ``unmatched_depth``: aged out without a partner, or
  (colour) still unpaired when a newer pair was emitted,
- ``overflow``: more than ``capacity`` frames pending on a stream,
- ``clock_jump``: pending when time jumped backwards by more than
  ``clock_jump_s`` (a bag loop or a simulation reset); the buffer restarts
  from the new time instead of dropping everything after the jump as too old.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
from typing import Any

COLOR, DEPTH = "color", "depth"


@dataclasses.dataclass
class SyncedPair:
    stamp_ns: int
    color: Any
    depth: Any
    skew_ns: int
    """depth stamp minus colour stamp."""


class _Stream:
    def __init__(self) -> None:
        self.stamps: list[int] = []
        self.items: list[Any] = []
        self.seen: collections.deque[int] = collections.deque()
        self.seen_set: set[int] = set()

    def insert(self, stamp_ns: int, item: Any) -> None:
        i = bisect.bisect(self.stamps, stamp_ns)
        self.stamps.insert(i, stamp_ns)
        self.items.insert(i, item)

    def pop(self, i: int) -> tuple[int, Any]:
        return self.stamps.pop(i), self.items.pop(i)

    def remember(self, stamp_ns: int) -> None:
        self.seen.append(stamp_ns)
        self.seen_set.add(stamp_ns)

    def forget_before(self, stamp_ns: int) -> None:
        while self.seen and self.seen[0] < stamp_ns:
            self.seen_set.discard(self.seen.popleft())

    def clear(self) -> int:
        n = len(self.stamps)
        self.stamps.clear()
        self.items.clear()
        self.seen.clear()
        self.seen_set.clear()
        return n


class RgbdSyncBuffer:
    """Pairs colour and depth frames by stamp (see module docstring for the rules)."""

    def __init__(self, max_skew_s: float = 0.010, max_age_s: float = 0.5,
                 capacity: int = 30, clock_jump_s: float = 1.0):
        if max_skew_s < 0 or max_age_s <= 0 or capacity < 1 or clock_jump_s <= max_age_s:
            raise ValueError("need max_skew_s >= 0, max_age_s > 0, capacity >= 1, "
                             "clock_jump_s > max_age_s")
        self.max_skew_ns = int(round(max_skew_s * 1e9))
        self.max_age_ns = int(round(max_age_s * 1e9))
        self.clock_jump_ns = int(round(clock_jump_s * 1e9))
        self.capacity = capacity
        self.drops: collections.Counter[str] = collections.Counter()
        self.pairs_emitted = 0
        self.clock_jumps = 0
        self._streams = {COLOR: _Stream(), DEPTH: _Stream()}
        self._newest_ns: int | None = None
        self._last_output_ns: int | None = None

    def add_color(self, stamp_ns: int, frame: Any) -> list[SyncedPair]:
        return self._add(COLOR, stamp_ns, frame)

    def add_depth(self, stamp_ns: int, frame: Any) -> list[SyncedPair]:
        return self._add(DEPTH, stamp_ns, frame)

    def pending(self, stream: str) -> int:
        return len(self._streams[stream].stamps)

    def is_pending(self, stream: str, stamp_ns: int) -> bool:
        """Whether a frame of ``stream`` with this stamp waits for its partner."""
        stamps = self._streams[stream].stamps
        i = bisect.bisect_left(stamps, int(stamp_ns))
        return i < len(stamps) and stamps[i] == int(stamp_ns)

    def reset(self) -> None:
        """Forget all pending frames and history (not counted as drops)."""
        for s in self._streams.values():
            s.clear()
        self._newest_ns = None
        self._last_output_ns = None

    def _add(self, name: str, stamp_ns: int, frame: Any) -> list[SyncedPair]:
        stamp_ns = int(stamp_ns)
        stream = self._streams[name]
        if self._newest_ns is not None and stamp_ns < self._newest_ns - self.clock_jump_ns:
            self.clock_jumps += 1
            for s in self._streams.values():
                self.drops["clock_jump"] += s.clear()
            self._newest_ns = None
            self._last_output_ns = None
        if self._newest_ns is not None and stamp_ns < self._newest_ns - self.max_age_ns:
            self.drops["too_old"] += 1
            return []
        late_bound = self._last_output_ns
        if late_bound is not None and name == DEPTH:
            late_bound -= self.max_skew_ns
        if late_bound is not None and stamp_ns <= late_bound:
            self.drops["late"] += 1
            return []
        if stamp_ns in stream.seen_set:
            self.drops["duplicate_stamp"] += 1
            return []
        stream.insert(stamp_ns, frame)
        stream.remember(stamp_ns)
        if len(stream.stamps) > self.capacity:
            stream.pop(0)
            self.drops["overflow"] += 1
        if self._newest_ns is None or stamp_ns > self._newest_ns:
            self._newest_ns = stamp_ns
        self._evict()
        return self._match()

    def _evict(self) -> None:
        assert self._newest_ns is not None  # set by _add
        horizon = self._newest_ns - self.max_age_ns
        for name, stream in self._streams.items():
            while stream.stamps and stream.stamps[0] < horizon:
                stream.pop(0)
                self.drops[f"unmatched_{name}"] += 1
            stream.forget_before(horizon)

    def _match(self) -> list[SyncedPair]:
        colors, depths = self._streams[COLOR], self._streams[DEPTH]
        out = []
        i = 0
        while i < len(colors.stamps) and depths.stamps:
            t = colors.stamps[i]
            j = bisect.bisect(depths.stamps, t)
            best = min((k for k in (j - 1, j) if 0 <= k < len(depths.stamps)),
                       key=lambda k: abs(depths.stamps[k] - t))
            skew = depths.stamps[best] - t
            if abs(skew) > self.max_skew_ns:
                i += 1
                continue
            if self._last_output_ns is not None and t <= self._last_output_ns:
                colors.pop(i)
                self.drops["late"] += 1
                continue
            _, color = colors.pop(i)
            _, depth = depths.pop(best)
            self._last_output_ns = t
            self.pairs_emitted += 1
            out.append(SyncedPair(t, color, depth, skew))
        last = self._last_output_ns
        while out and last is not None and colors.stamps and colors.stamps[0] <= last:
            colors.pop(0)
            self.drops["unmatched_color"] += 1
        return out
