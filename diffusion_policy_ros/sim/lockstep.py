"""The sim's half of the lockstep with the arm controller, as a pure state machine.

In the lockstep (a simulator's synchronous mode) the sim publishes a ``joint_states``
and steps no further until the arm command answering it arrives. ``sim_node`` owns
the ROS side (publishing, stepping, logging); this class decides, from wall times
alone, what each loop turn and each arriving command means:

- an answer within ``resend_s`` steps the sim on;
- none within ``resend_s`` (DDS lost the state or the answer) asks again: the node
  publishes the same ``joint_states`` again;
- the answer to such a copy, or the late first answer, repeats the effort already
  applied (same state, same stamp, same effort) and is dropped as a duplicate, so the
  loop never runs one state behind;
- none within ``timeout_s`` (no controller, or a stalled one) gives up: the sim
  free-runs with expiring efforts until a command arrives again.

Before a resend or a timeout is declared, the interval must have passed on two loop
turns: the executor runs ready timers before ready subscriptions, so a command that
is already queued gets one turn to be taken (this process may itself have been
descheduled for the whole interval).
"""

from __future__ import annotations

import enum

import numpy as np

from diffusion_policy_ros.monitoring import RollingStats


class TurnVerdict(enum.Enum):
    """What a loop turn does while a ``joint_states`` waits for its command."""
    WAIT = "wait"
    ASK_AGAIN = "ask_again"
    TIMED_OUT = "timed_out"


class CommandVerdict(enum.Enum):
    """What an arriving (valid) arm command is."""
    ANSWER = "answer"          # answers the awaited joint_states: apply it and step on
    DUPLICATE = "duplicate"    # repeats the last answer (to a copy): drop it
    RESUMED = "resumed"        # the first command after a timeout: the lockstep resumes
    UNASKED = "unasked"        # nothing awaited (free-running, or between states): apply it


class LockstepHandshake:
    """When to step, ask again, drop a duplicate or give up; wall times in seconds.

    ``resend_s`` 0 never asks again. Counters: ``timeouts``, ``resends``,
    ``duplicates``; ``wait_ms`` holds the wall time from a state to its answer.
    """

    def __init__(self, timeout_s: float, resend_s: float = 0.0, wait_window: int = 2000):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if resend_s < 0 or (resend_s and resend_s >= timeout_s):
            raise ValueError(f"resend_s must be 0 or in (0, timeout_s={timeout_s}), "
                             f"got {resend_s}")
        self.timeout_s = timeout_s
        self.resend_s = resend_s
        self.timeouts = 0
        self.resends = 0
        self.duplicates = 0
        self.wait_ms = RollingStats(window=wait_window)
        self.free_running = False
        self._awaiting_since: float | None = None
        self._asked_at = 0.0
        self._timeout_seen = False
        self._resend_seen = False
        # Answers still to come to the awaited state's copies, and to the last answered
        # state's (with the effort they repeat).
        self._copies_out = 0
        self._twins_left = 0
        self._twin_effort: np.ndarray | None = None

    @property
    def awaiting(self) -> bool:
        """A ``joint_states`` is out and its command has not arrived."""
        return self._awaiting_since is not None

    def asked(self, now_s: float) -> None:
        """A new ``joint_states`` went out: wait for its command."""
        self._awaiting_since = self._asked_at = now_s
        self._timeout_seen = self._resend_seen = False
        self._copies_out = 0

    def cancel(self) -> None:
        """Nothing is awaited any more (a reset, or the lockstep switched off)."""
        self._awaiting_since = None
        self._timeout_seen = self._resend_seen = False
        self._copies_out = self._twins_left = 0

    def on_turn(self, now_s: float) -> TurnVerdict:
        """A loop turn while ``awaiting``: wait, ask again, or give up (free-run)."""
        if self._awaiting_since is None:
            raise RuntimeError("on_turn while nothing is awaited")
        if now_s - self._awaiting_since > self.timeout_s:
            if not self._timeout_seen:
                self._timeout_seen = True
                return TurnVerdict.WAIT
            self.cancel()
            self.free_running = True
            self.timeouts += 1
            return TurnVerdict.TIMED_OUT
        self._timeout_seen = False
        if not self.resend_s or now_s - self._asked_at < self.resend_s:
            return TurnVerdict.WAIT
        if not self._resend_seen:
            self._resend_seen = True
            return TurnVerdict.WAIT
        self._resend_seen = False
        self._asked_at = now_s
        self.resends += 1
        self._copies_out += 1
        return TurnVerdict.ASK_AGAIN

    def on_command(self, effort: np.ndarray, now_s: float) -> CommandVerdict:
        """A valid arm command arrived."""
        if self._twins_left:
            twin = self._twin_effort
            if (self._awaiting_since is not None and twin is not None
                    and np.array_equal(effort, twin)):
                self._twins_left -= 1
                self.duplicates += 1
                return CommandVerdict.DUPLICATE
            self._twins_left = 0
        if self.free_running:
            self.free_running = False
            self.cancel()
            return CommandVerdict.RESUMED
        if self._awaiting_since is None:
            return CommandVerdict.UNASKED
        self.wait_ms.add((now_s - self._awaiting_since) * 1e3)
        copies = self._copies_out
        self.cancel()
        self._twins_left, self._twin_effort = copies, np.array(effort, copy=True)
        return CommandVerdict.ANSWER
