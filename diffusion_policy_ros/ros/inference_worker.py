"""``InferenceWorker``: when ``policy_node`` computes a chunk, and the thread it does it on.

What starts a chunk: with a ``FrameRateSchedule`` (tick_source observation), the frame
that completes an observation, about ``rate_hz`` of them a second on the frames' stamps
(``frame``), so the chunk starts as soon as its observation is complete; the rate timer
(``timer``) then ticks only when frames stop, so a missing camera is still refused and
reported (``watchdog_ticks``). Without a schedule (tick_source timer) every timer tick
does. The image of a frame that will start a chunk, come ahead of its cloud, is encoded
meanwhile (``image``).

Handlers only mark work as due and return; the thread does it in order: a pending
instruction first (it starts a task), then an image to encode, then the chunk. A tick
marked while a chunk is still computing is coalesced and counted (``overrun_ticks``).
Idle, the thread wakes every ``idle_period_s`` (``idle``). So subscriptions, services
and diagnostics keep running while the policy computes, under any executor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from diffusion_policy_ros.perception.frame_schedule import FrameRateSchedule


class InferenceWorker:
    """``take_instruction() -> bool`` (True: one was taken), ``idle()``, ``encode(image)``
    and ``tick()`` run on the thread; ``failed(exc)`` gets what they raised and returns
    True to end the thread. ``may_act()``: whether chunks are wanted at all now."""

    def __init__(self, frames: FrameRateSchedule | None, *, may_act: Callable[[], bool],
                 instruction_ready: Callable[[], bool], take_instruction: Callable[[], bool],
                 idle: Callable[[], None], encode: Callable[[np.ndarray], None],
                 tick: Callable[[], None], failed: Callable[[Exception], bool],
                 idle_period_s: float, name: str):
        self.frames = frames
        self._may_act = may_act
        self._instruction_ready = instruction_ready
        self._take_instruction = take_instruction
        self._idle = idle
        self._encode = encode
        self._tick = tick
        self._failed = failed
        self.idle_period_s = idle_period_s
        self._lock = threading.Condition()
        self._tick_due = False
        self._image_due: np.ndarray | None = None
        self._closing = False
        self._last_tick_ns: int | None = None  # the clock of ``frame`` and ``timer``
        self.overrun_ticks = 0
        self.watchdog_ticks = 0
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def frame(self, stamp_ns: int, now_ns: int) -> None:
        """A complete observation frame arrived."""
        if self.frames is None:
            return
        with self._lock:
            due = self.frames.on_frame(stamp_ns)
        if due:
            self._mark_tick(now_ns)

    def image(self, stamp_ns: int, image: np.ndarray) -> None:
        """The image of a frame whose cloud is still on its way."""
        if self.frames is None or not self._may_act():
            return
        with self._lock:
            if self.frames.would_take(stamp_ns):
                self._image_due = image
                self._lock.notify()

    def timer(self, now_ns: int) -> None:
        """The rate timer fired."""
        if self.frames is not None:
            if self._last_tick_ns is not None and \
                    now_ns - self._last_tick_ns < 1.5 * self.frames.period_ns:
                return
            self.watchdog_ticks += 1
        self._mark_tick(now_ns)

    def restart(self) -> None:
        """A new task: its first frame starts a chunk."""
        if self.frames is not None:
            with self._lock:
                self.frames.restart()

    def wake(self) -> None:
        """Look for an instruction now."""
        with self._lock:
            self._lock.notify()

    def stop(self, timeout_s: float = 10.0) -> None:
        with self._lock:
            self._closing = True
            self._lock.notify()
        self.thread.join(timeout=timeout_s)

    def _mark_tick(self, now_ns: int) -> None:
        if not self._may_act():
            return
        with self._lock:
            if self._tick_due:
                self.overrun_ticks += 1  # the thread is still on the previous chunk
            self._tick_due = True
            self._last_tick_ns = now_ns
            self._lock.notify()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not (self._tick_due or self._image_due is not None or self._closing
                        or self._instruction_ready()):
                    self._lock.wait(self.idle_period_s)
                if self._closing:
                    return
                tick, self._tick_due = self._tick_due, False
                image, self._image_due = self._image_due, None
            try:
                taken = self._take_instruction()
                if not (tick or taken or image is not None):
                    self._idle()
                    continue
                if image is not None:
                    self._encode(image)
                if tick:
                    self._tick()
            except Exception as exc:  # noqa: BLE001 - the worker must survive anything
                if self._failed(exc):
                    return
