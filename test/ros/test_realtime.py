"""SCHED_FIFO request: granted, or refused with a reason; never an exception. The periodic
control thread: steps until stopped, skips missed deadlines, keeps its failure."""

import os
import subprocess
import sys
import threading
import time

from diffusion_policy_ros.ros.realtime import PeriodicThread, request_fifo_priority


def test_zero_means_not_requested():
    assert request_fifo_priority(0) == "not requested"


def test_fifo_is_granted_or_refused_with_a_reason():
    # In a child: the scheduling class must not leak into the test process.
    code = ("import os; from diffusion_policy_ros.ros.realtime import request_fifo_priority as r;"
            "print(r(10) or 'granted'); print(os.sched_getscheduler(0) == os.SCHED_FIFO)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=os.environ.copy(), check=True).stdout.splitlines()
    result, fifo = out[0], out[1] == "True"
    assert (result == "granted" and fifo) or ("SCHED_FIFO" in result and not fifo)


def test_fifo_for_another_thread_leaves_the_caller_as_it_was():
    code = """
import os, threading
from diffusion_policy_ros.ros.realtime import request_fifo_priority
go = threading.Event()
worker = threading.Thread(target=go.wait)
worker.start()
print(request_fifo_priority(10, worker.native_id) or 'granted')
print(os.sched_getscheduler(worker.native_id) == os.SCHED_FIFO)
print(os.sched_getscheduler(0) == os.SCHED_FIFO)
go.set()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=os.environ.copy(), check=True).stdout.splitlines()
    result, worker_fifo, caller_fifo = out[0], out[1] == "True", out[2] == "True"
    assert (result == "granted" and worker_fifo) or ("SCHED_FIFO" in result and not worker_fifo)
    assert not caller_fifo


def test_periodic_thread_steps_until_stopped():
    steps = threading.Semaphore(0)
    loop = PeriodicThread(steps.release, period_s=0.002, priority=0, name="test_loop")
    assert loop.start() == "not requested"
    for _ in range(20):
        assert steps.acquire(timeout=10.0)
    loop.stop()
    assert not loop.running and loop.failure is None


def test_periodic_thread_skips_missed_deadlines_instead_of_bursting():
    period_s = 0.002
    steps = threading.Semaphore(0)
    count = [0]

    def step():
        count[0] += 1
        if count[0] == 3:
            time.sleep(3.5 * period_s)  # ok-sleep: a deliberate overrun of over three periods
        steps.release()

    loop = PeriodicThread(step, period_s=period_s, priority=0, name="test_loop")
    loop.start()
    for _ in range(6):
        assert steps.acquire(timeout=10.0)
    loop.stop()
    assert count[0] >= 6
    assert loop.skipped_deadlines >= 2


def test_periodic_thread_keeps_a_failure_for_its_owner():
    stepped = threading.Event()

    def step():
        stepped.set()
        raise ValueError("law failed")

    loop = PeriodicThread(step, period_s=0.002, priority=0, name="test_loop")
    loop.start()
    assert stepped.wait(timeout=10.0)
    loop.stop()  # joins the thread, which has ended with the failure
    assert not loop.running
    assert isinstance(loop.failure, ValueError)


def test_niceness_reaches_every_thread_and_those_started_later():
    # In a child: niceness cannot be lowered back without privileges. A positive one
    # needs none, so this runs the same as root and as a user.
    code = """
import os, threading
from diffusion_policy_ros.ros.realtime import request_niceness
ready, done = threading.Event(), threading.Event()
before = threading.Thread(target=lambda: (ready.set(), done.wait()))
before.start(); ready.wait()
print(request_niceness(0))
print(request_niceness(7) or "granted")
seen = {}
after = threading.Thread(target=lambda: seen.update(n=os.getpriority(os.PRIO_PROCESS, 0)))
after.start(); after.join(); done.set(); before.join()
print(sorted({os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")}))
print(seen["n"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=os.environ.copy(), check=True).stdout.splitlines()
    start_niceness = os.getpriority(os.PRIO_PROCESS, 0)
    assert out[0] == "not requested"
    if start_niceness <= 7:
        assert out[1:] == ["granted", "[7]", "7"]
    else:  # raising it back towards 7 needs privileges: refused with the reason
        assert "niceness 7" in out[1]
