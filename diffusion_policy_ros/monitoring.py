"""Pure helpers for node health reporting: rates, latency percentiles, blocking calls,
throttled reasons."""

from __future__ import annotations

import collections
import os

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


class SimTimeToWall:
    """When, in wall time, a simulation was at a given sim time, from its ``/clock``
    messages' publication (source) timestamps.

    On sim time a node's ROS clock holds the last ``/clock`` it has processed, which
    lags the simulation by up to one clock period (10 ms at ``sim_node``'s 100 Hz) plus
    however late the node's own executor is; "now minus a stamp" read from it is coarse
    and too small. Interpolating the sim time -> publication time pairs instead gives
    the wall time at a stamp to the publisher's jitter, and a latency from it (e.g. to a
    message's reception timestamp) does not depend on the measuring node's lateness.
    """

    def __init__(self, window: int = 500):
        self._sim_ns: collections.deque[int] = collections.deque(maxlen=window)
        self._wall_ns: collections.deque[int] = collections.deque(maxlen=window)

    def add(self, sim_ns: int, wall_ns: int) -> None:
        """One ``/clock``: its sim time and the wall time it was published (ns)."""
        if self._sim_ns and sim_ns <= self._sim_ns[-1]:
            if sim_ns == self._sim_ns[-1]:
                return  # the same instant again (a paused simulation)
            self._sim_ns.clear()  # sim time went back: a restarted simulation
            self._wall_ns.clear()
        self._sim_ns.append(int(sim_ns))
        self._wall_ns.append(int(wall_ns))

    def newest_sim_ns(self) -> int | None:
        """The latest sim time in the window (None while empty)."""
        return self._sim_ns[-1] if self._sim_ns else None

    def wall_ns_at(self, sim_ns: int) -> float | None:
        """The wall time (ns) at ``sim_ns``, interpolated; None outside the window."""
        if len(self._sim_ns) < 2 or not self._sim_ns[0] <= sim_ns <= self._sim_ns[-1]:
            return None
        return float(np.interp(sim_ns, np.asarray(self._sim_ns, dtype=np.float64),
                               np.asarray(self._wall_ns, dtype=np.float64)))


class LatencyStages:
    """Where each chunk's observation stamp -> chunk received latency goes, hop by hop,
    from the publication (source) timestamps the middleware gives each sample.

    Stages (ms), which add up to the whole latency:

    - ``frame``: the stamp -> the camera's ``camera_info`` published (the simulated
      Kinect: the scene captured, drawn and converted; a real one: its driver's delay);
    - ``sync``: -> ``observation/points`` published (the images' publication and
      transport, ``rgbd_sync_node``'s pairing and pipeline);
    - ``policy``: -> the chunk published (the points' delivery, ``policy_node``'s
      history and predict);
    - ``delivery``: -> the chunk received.

    Samples arrive in any order on one reader thread: a chunk whose frame or points
    have not been seen yet waits until they come, or until a newer one of each shows
    that they never will (a lost sample; those stages are then NaN). ``keep``: how many
    stamps of each topic are remembered, and how many chunks wait at most (without a
    camera none would ever be resolved).
    """

    STAGES = ("frame", "sync", "policy", "delivery")

    def __init__(self, keep: int = 300):
        self._keep = keep
        self._frames: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._points: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._pending: list[tuple] = []
        self._results: dict = {}

    def frame_published(self, stamp_ns: int, source_ns: int) -> None:
        self._remember(self._frames, stamp_ns, source_ns)

    def points_published(self, stamp_ns: int, source_ns: int) -> None:
        self._remember(self._points, stamp_ns, source_ns)

    def chunk(self, key, stamp_ns: int, stamp_wall_ns: float, published_ns: int,
              received_ns: int) -> None:
        """A chunk (``key``: the caller's name for it) conditioned on the observation
        stamped ``stamp_ns``, which the simulation or the camera reached at wall time
        ``stamp_wall_ns``; published and received at those wall times (ns)."""
        self._pending.append((key, int(stamp_ns), float(stamp_wall_ns), int(published_ns),
                              int(received_ns)))
        if len(self._pending) > self._keep:
            self._resolve(self._pending.pop(0), None, None)
        self._settle()

    def stages_ms(self, key) -> dict[str, float] | None:
        """The chunk's stages, or None while its frame or points may still come."""
        return self._results.get(key)

    def _remember(self, table: collections.OrderedDict, stamp_ns: int, source_ns: int) -> None:
        if table and stamp_ns < next(reversed(table)):
            self._settle(give_up=True)  # stamps went back: a restarted simulation or bag
            table.clear()
        table[int(stamp_ns)] = int(source_ns)
        while len(table) > self._keep:
            table.popitem(last=False)
        if self._pending:
            self._settle()

    def _settle(self, give_up: bool = False) -> None:
        waiting = []
        for item in self._pending:
            stamp_ns = item[1]
            frame_ns, points_ns = self._frames.get(stamp_ns), self._points.get(stamp_ns)
            lost = give_up or all(table and next(reversed(table)) > stamp_ns
                                  for table in (self._frames, self._points))
            if (frame_ns is None or points_ns is None) and not lost:
                waiting.append(item)
            else:
                self._resolve(item, frame_ns, points_ns)
        self._pending = waiting

    def _resolve(self, item: tuple, frame_ns: int | None, points_ns: int | None) -> None:
        key, _, stamp_wall_ns, published_ns, received_ns = item
        frame = float("nan") if frame_ns is None else frame_ns
        points = float("nan") if points_ns is None else points_ns
        self._results[key] = {
            "frame": (frame - stamp_wall_ns) * 1e-6,
            "sync": (points - frame) * 1e-6,
            "policy": (published_ns - points) * 1e-6,
            "delivery": (received_ns - published_ns) * 1e-6,
        }


class BlockingWatch:
    """Durations of a call that must not block (a publish in a control loop): the
    longest since the last report, and how many reached ``stall_s``."""

    def __init__(self, stall_s: float):
        self.stall_s = stall_s
        self.stalls = 0
        self._max_s = 0.0

    def note(self, took_s: float) -> bool:
        """Record one call; True when it was a stall (counted)."""
        self._max_s = max(self._max_s, took_s)
        if took_s < self.stall_s:
            return False
        self.stalls += 1
        return True

    def take_max_s(self) -> float:
        """The longest call since the last take (0 without calls)."""
        longest, self._max_s = self._max_s, 0.0
        return longest


class ThrottledReasons:
    """Counts events by reason and says when each reason may be logged again.

    rclpy's ``throttle_duration_sec`` throttles per call site, so one site that
    reports many reasons would hide all but the first; this throttles per reason.
    """

    def __init__(self, period_s: float = 2.0):
        self.period_s = period_s
        self.counts: collections.Counter[str] = collections.Counter()
        self._last_log: dict[str, float] = {}

    def count(self, reason: str) -> None:
        """Count one ``reason`` that is not to be logged; its log window stays as it was."""
        self.counts[reason] += 1

    def record(self, reason: str, now_s: float) -> bool:
        """Count one ``reason``; True when it should be logged now."""
        self.count(reason)
        last = self._last_log.get(reason)
        if last is None or now_s - last >= self.period_s:
            self._last_log[reason] = now_s
            return True
        return False


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds a process (all its threads) has used, from Linux /proc;
    None where there is no /proc or the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_sim_second(before: dict[str, float | None], after: dict[str, float | None],
                       sim_s: float) -> dict[str, float] | None:
    """Core-seconds each process used per second of sim time between two ``process_cpu_s``
    snapshots, with their ``total``; None without sim time or readings."""
    used = {name: now - then for name, then in before.items()
            if then is not None and (now := after.get(name)) is not None}
    if sim_s <= 0 or not used:
        return None
    per = {name: round(cpu / sim_s, 3) for name, cpu in used.items()}
    per["total"] = round(sum(used.values()) / sim_s, 3)
    return per


class TokenBucket:
    """At most ``burst`` events at once, then one per ``period_s``: a bound on a rate that
    still lets a short burst through unhindered."""

    def __init__(self, burst: int, period_s: float):
        if burst < 1 or period_s < 0:
            raise ValueError(f"burst must be >= 1 and period_s >= 0, got {burst}, {period_s}")
        self.burst = burst
        self.period_s = period_s
        self._tokens = float(burst)
        self._last_s: float | None = None

    def _refill(self, now_s: float) -> None:
        if self._last_s is not None and now_s > self._last_s:
            gained = (now_s - self._last_s) / self.period_s if self.period_s > 0 else self.burst
            self._tokens = min(float(self.burst), self._tokens + gained)
        if self._last_s is None or now_s > self._last_s:
            self._last_s = now_s

    def ready(self, now_s: float) -> bool:
        """True when ``take`` would succeed now (nothing is taken)."""
        self._refill(now_s)
        return self._tokens >= 1.0 - 1e-9

    def take(self, now_s: float) -> bool:
        """Take one event's token; False (nothing taken) while none is left."""
        if not self.ready(now_s):
            return False
        self._tokens = max(0.0, self._tokens - 1.0)
        return True

    def wait_s(self, now_s: float) -> float:
        """Seconds until ``take`` succeeds (0 when it would now)."""
        self._refill(now_s)
        return max(0.0, (1.0 - self._tokens) * self.period_s)


#: Characters of a user's string that go into a log line (``excerpt``).
EXCERPT_CHARS = 80


def excerpt(text: str, max_chars: int = EXCERPT_CHARS) -> str:
    """``text`` as it may go into a log line: at most ``max_chars`` of it, then '...' and
    its length, with line breaks and other control characters escaped, so that a
    megabyte or a forged second line from a topic cannot flood or fake the log."""
    cut = text[:max_chars]
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut)
    return shown if len(text) <= max_chars else f"{shown}... ({len(text)} chars)"


class LogBudget:
    """Log lines of one kind bounded per second whatever the event rate: ``burst`` at
    once, then one per ``period_s`` (``TokenBucket``); the lines left out are counted."""

    def __init__(self, burst: int = 5, period_s: float = 1.0):
        self._bucket = TokenBucket(burst, period_s)
        self.left_out = 0
        self._left_out_unsaid = 0

    def allow(self, now_s: float) -> int | None:
        """None: leave this line out (counted). Otherwise log it; the number is how many
        were left out since the last one logged (for the line to say so)."""
        if not self._bucket.take(now_s):
            self.left_out += 1
            self._left_out_unsaid += 1
            return None
        unsaid, self._left_out_unsaid = self._left_out_unsaid, 0
        return unsaid
