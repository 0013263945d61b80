"""Real-time scheduling for control loops, the way ros2_control's controller manager does it.

Under ``SCHED_FIFO`` the kernel runs the loop's thread as soon as it wakes,
ahead of every normal-priority task (policy inference, rendering), which is
what keeps a 500 Hz period steady on a loaded machine. Linux's RT throttling
(95% of each second by default) bounds what a runaway loop could take.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

GIL_SWITCH_INTERVAL_S = 1e-4
"""``sys.setswitchinterval`` for a node whose timing-critical thread shares the GIL with
another busy one: that thread gets the GIL back within this, not Python's default 5 ms."""


def request_fifo_priority(priority: int, thread_id: int = 0) -> str:
    """Put the thread ``thread_id`` (its ``native_id``; 0 = the calling thread) under
    SCHED_FIFO at ``priority``; '' on success, else why not.

    On Linux the policy is per thread; threads started afterwards inherit it.
    """
    if priority <= 0:
        return "not requested"
    if not hasattr(os, "sched_setscheduler"):
        return "SCHED_FIFO is not available on this platform"
    try:
        os.sched_setscheduler(thread_id, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError:
        return (f"no permission for SCHED_FIFO priority {priority} (needs CAP_SYS_NICE or "
                "'rtprio' in /etc/security/limits.conf)")
    except OSError as exc:
        return f"SCHED_FIFO priority {priority} refused: {exc}"
    return ""


def request_niceness(niceness: int) -> str:
    """Give every thread of this process ``niceness``; '' on success, else why not.

    On Linux niceness belongs to each thread and a new thread inherits its creator's,
    so the threads started afterwards (torch's, DDS's) get it too. Below 0 the process's
    work runs ahead of normal-priority work (weighted by the scheduler, not strictly as
    under SCHED_FIFO, so nothing is starved).
    """
    if niceness == 0:
        return "not requested"
    tasks = "/proc/self/task"
    tids = [int(t) for t in os.listdir(tasks)] if os.path.isdir(tasks) else [0]
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except ProcessLookupError:
            continue  # the thread ended meanwhile
        except PermissionError:
            return (f"no permission for niceness {niceness} (needs CAP_SYS_NICE or a 'nice' "
                    "limit in /etc/security/limits.conf)")
        except OSError as exc:
            return f"niceness {niceness} refused: {exc}"
    return ""


def apply_niceness(niceness: int, logger, otherwise: str) -> str:
    """``request_niceness``, with a warning that says what runs instead (``otherwise``:
    what that means for the node) when it is refused; returns the scheduling as it is."""
    problem = request_niceness(niceness)
    scheduling = f"niceness {os.getpriority(os.PRIO_PROCESS, 0)}"
    if niceness and problem:
        logger.warning(f"niceness: {problem}; running as started ({scheduling}): {otherwise}")
    return scheduling


class _ControlThread:
    """A daemon thread that puts itself under ``SCHED_FIFO`` at ``priority`` and runs
    ``_loop`` until ``stop``; an exception ends it and is kept in ``failure`` for the
    owner to report."""

    def __init__(self, priority: int, name: str):
        self.priority = priority
        self.scheduling_problem = "not started"
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> str:
        """Start the thread; '' when it runs under SCHED_FIFO, else why not (it runs anyway)."""
        self._thread.start()
        self._started.wait()
        return self.scheduling_problem

    def stop(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        self._interrupt()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _interrupt(self) -> None:
        """Cut a wait of ``_loop`` short (called by ``stop``)."""

    def _loop(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        # On Linux a scheduling policy belongs to a thread: this one alone gets it.
        self.scheduling_problem = request_fifo_priority(self.priority)
        self._started.set()
        try:
            self._loop()
        except BaseException as exc:  # reported by the owner (see ``failure``)
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        self.failure = exc

    def raise_failure(self, what: str) -> None:
        """Raise for the owner (``what`` stopped) if ``_loop`` ended with an exception."""
        if self.failure is not None:
            raise RuntimeError(f"{what} stopped") from self.failure


class PeriodicThread(_ControlThread):
    """Calls ``step()`` every ``period_s`` at absolute steady-clock deadlines, on its own thread.

    Why not an executor timer: a timer shares its thread with every callback of the
    node, so a chunk conversion or a burst of joint_states that happens to run when
    the deadline passes delays the tick by its whole length. Here the loop sleeps to
    its deadline on a thread under ``SCHED_FIFO`` and needs only the GIL, which the
    executor releases while it waits and hands over within the switch interval
    while it runs Python (the node shortens that interval). A late wake-up never
    makes up missed deadlines in a burst: they are skipped and counted.
    """

    def __init__(self, step: Callable[[], None], period_s: float, priority: int, name: str):
        self._step = step
        self.period_s = period_s
        self.skipped_deadlines = 0
        super().__init__(priority, name)

    def _loop(self) -> None:
        deadline_s = time.monotonic()
        while not self._stop.is_set():
            deadline_s += self.period_s
            delay_s = deadline_s - time.monotonic()
            if delay_s > 0.0:
                time.sleep(delay_s)
            elif delay_s <= -self.period_s:
                skipped = int(-delay_s // self.period_s)
                self.skipped_deadlines += skipped
                deadline_s += skipped * self.period_s
            self._step()


class MessageDrivenThread(_ControlThread):
    """Calls ``on_message(msg)`` for each message of a ``WaitedSubscription``, in arrival
    order, on a thread of its own under ``SCHED_FIFO`` (``priority`` 0: normal scheduling).

    For a law that must answer every message (``pd_tracker_node`` under sim_node's
    lockstep): the thread wakes for the message itself, with nothing between it and
    the callback but one take, where an executor would first rebuild its wait set of
    every entity of the node and dispatch through its task machinery.

    ``after_wake`` (optional) runs after the messages of every wake-up, a message's or
    the timeout's, and ``wait_s`` (optional) says how long the next wait may last: a
    loop with a pace of its own (``sim_node``'s physics) then needs no executor timer.
    ``wake`` cuts the current wait short (for an owner whose state changed).
    """

    def __init__(self, source, on_message: Callable[[object], None], priority: int,
                 name: str, idle_wait_s: float = 0.1,
                 after_wake: Callable[[], None] | None = None,
                 wait_s: Callable[[], float] | None = None):
        self._source = source
        self._on_message = on_message
        self._after_wake = after_wake
        self._wait_s = wait_s
        self.idle_wait_s = idle_wait_s
        super().__init__(priority, name)

    def wake(self) -> None:
        self._source.wake()

    def _interrupt(self) -> None:
        self.wake()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._source.wait(self.idle_wait_s if self._wait_s is None else self._wait_s())
            for msg in self._source.take_all():
                self._on_message(msg)
            if self._after_wake is not None:
                self._after_wake()

    def _failed(self, exc: BaseException) -> None:
        if not self._stop.is_set():  # a wait cut short by shutdown is no failure
            self.failure = exc
