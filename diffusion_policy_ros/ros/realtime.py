"""Real-time scheduling for control loops, the way ros2_control's controller manager does it.

Under ``SCHED_FIFO`` the kernel runs the loop's process as soon as it wakes,
ahead of every normal-priority task (policy inference, rendering), which is
what keeps a 500 Hz period steady on a loaded machine. Linux's RT throttling
(95% of each second by default) bounds what a runaway loop could take.
"""

from __future__ import annotations

import os


def request_fifo_priority(priority: int) -> str:
    """Put this process under SCHED_FIFO at ``priority``; '' on success, else why not."""
    if priority <= 0:
        return "not requested"
    if not hasattr(os, "sched_setscheduler"):
        return "SCHED_FIFO is not available on this platform"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError:
        return (f"no permission for SCHED_FIFO priority {priority} (needs CAP_SYS_NICE or "
                "'rtprio' in /etc/security/limits.conf)")
    except OSError as exc:
        return f"SCHED_FIFO priority {priority} refused: {exc}"
    return ""
