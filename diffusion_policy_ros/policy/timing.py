"""Per-stage wall-clock timing that waits for the accelerator at stage borders.

Kernels on cuda / npu run asynchronously, so a stage is timed between two
device synchronisations; on the CPU ``sync`` is a no-op and the timer costs
two ``perf_counter`` calls per stage.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import numpy as np


class StageTimer:
    """Collects durations (s) per stage name; a stage may repeat (one per denoiser step)."""

    def __init__(self, sync: Callable[[], None] | None = None):
        self._sync = sync or (lambda: None)
        self.durations_s: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self._sync()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.durations_s.setdefault(name, []).append(time.perf_counter() - t0)

    def reset(self) -> None:
        self.durations_s = {}

    def summary_ms(self) -> dict[str, float]:
        """Median duration of each stage (ms)."""
        return {name: 1e3 * float(np.median(d)) for name, d in self.durations_s.items()}


def timed(timer: StageTimer | None, name: str) -> contextlib.AbstractContextManager:
    """``timer.stage(name)``, or a no-op when no timer is given."""
    return timer.stage(name) if timer is not None else contextlib.nullcontext()
