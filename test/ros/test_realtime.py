"""SCHED_FIFO request: granted, or refused with a reason; never an exception."""

import os
import subprocess
import sys

from diffusion_policy_ros.ros.realtime import request_fifo_priority


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
