"""What ``policy_node`` tells its operator, bounded so that no input can flood the log:
refusals to act (a WARN per reason at most every ``period_s``), inputs ignored,
instructions refused or coalesced, and what the chunk rules did instead of the policy.
No rclpy here: ``logger`` is the node's (one call site per severity, as rclpy asks)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from diagnostic_msgs.msg import DiagnosticStatus

from diffusion_policy_ros.acting.agent import (
    NO_INSTRUCTION,
    NON_FINITE_ACTION,
    OBSERVATION_MISMATCH,
    UNREAD_INSTRUCTION,
)
from diffusion_policy_ros.acting.observation_history import Refusal
from diffusion_policy_ros.acting.rules import RuleEvent
from diffusion_policy_ros.instructions.dialogue import Reading
from diffusion_policy_ros.monitoring import ThrottledReasons, excerpt

#: Refusals that need a person: ERROR on /diagnostics (the others are WARN).
ERROR_REFUSALS = ("inference_error", NON_FINITE_ACTION, OBSERVATION_MISMATCH)
#: Rule events that mean a rule could not do what it set out to: logged as warnings.
RULE_WARNINGS = ("lift_unsolved",)


def node_status(state: str, error: str, stopped: bool, refusal: Refusal | None,
                rate_hz: float, target_rate_hz: float) -> tuple[bytes, str]:
    """Level and message of ``policy_node``'s status on ``/diagnostics``: the first of
    these that applies (``state``: its lifecycle state; ``error``: why configure failed)."""
    warn, err = DiagnosticStatus.WARN, DiagnosticStatus.ERROR
    if error and state == "unconfigured":
        return err, error
    if state != "active":
        return warn, f"{state}: not acting"
    if stopped:
        return warn, "stopped by ~/stop"
    if refusal is not None:
        level = err if refusal.reason in ERROR_REFUSALS else warn
        return level, f"not acting ({refusal.reason}): {refusal.detail}"
    if rate_hz < 0.8 * target_rate_hz:
        return warn, f"chunks at {rate_hz:.1f} Hz, below {target_rate_hz:g} Hz"
    return DiagnosticStatus.OK, "acting"


def no_instruction_hint(topic: str) -> str:
    """What to do without an instruction; ``topic``: the subscription's resolved name (in
    the node's namespace, after remaps), so the command works as printed."""
    return (f"no instruction yet: publish one on '{topic}' (std_msgs/String), e.g. "
            f"ros2 topic pub --once --keep-alive 2 {topic} std_msgs/msg/String "
            "\"{data: 'pick up the red cube'}\"")


class OperatorLog:
    """``refusal``: why the node does not act now (None while it acts); ``refusals`` and
    ``rejected`` count by reason, for diagnostics. ``instruction_topic``: the resolved name
    the hint without an instruction names."""

    def __init__(self, logger, instruction_topic: str, period_s: float = 2.0):
        self.logger = logger
        self.no_instruction_hint = no_instruction_hint(instruction_topic)
        self.refusal: Refusal | None = None
        self.refusals = ThrottledReasons(period_s)
        self.rejected = ThrottledReasons(period_s)
        self._instructions = ThrottledReasons(period_s)
        self._mismatches_said: set[str] = set()

    def values(self) -> dict[str, str]:
        """The counts, as ``/diagnostics`` values."""
        return {**{f"rejected_{reason}": str(n)
                   for reason, n in sorted(self.rejected.counts.items())},
                **{f"refused_{reason}": str(n)
                   for reason, n in sorted(self.refusals.counts.items())}}

    def acted(self) -> None:
        self.refusal = None

    def refused(self, refusal: Refusal, warn: bool = True) -> None:
        """Not acting: kept and counted; a WARN unless ``warn`` is False (a debug line, the
        reason's WARN window untouched). Waiting for a person is the normal state after
        start-up: said once, with the hint. Observations that do not fit the checkpoint
        are a configuration error: an ERROR once per distinct mismatch."""
        reason = refusal.reason
        if reason == NO_INSTRUCTION:
            self.refusal = Refusal(reason, self.no_instruction_hint)
            self.refusals.count(reason)
            if self.refusals.counts[reason] == 1:
                self.logger.info(f"not acting yet: {self.no_instruction_hint}")
            return
        self.refusal = refusal
        if reason == UNREAD_INSTRUCTION:  # said when the instruction came
            self.refusals.count(reason)
            return
        if reason == OBSERVATION_MISMATCH:  # a configuration error: said once, as an error
            self.refusals.count(reason)
            if refusal.detail not in self._mismatches_said:
                self._mismatches_said.add(refusal.detail)
                self.logger.error(f"not acting, holding: {refusal.detail}")
            return
        if not warn:
            self.refusals.count(reason)
            self.logger.debug(f"not acting yet ({reason}): {refusal.detail}")
        elif self.refusals.record(reason, time.monotonic()):
            self.logger.warning(f"not acting ({reason}): {refusal.detail} "
                                f"[{self.refusals.counts[reason]} so far]")

    def rejected_input(self, reason: str, message: str) -> None:
        if self.rejected.record(reason, time.monotonic()):
            self.logger.error(f"{message} [{self.rejected.counts[reason]} so far]")

    def instruction_refused(self, text: str, max_chars: int, refused_total: int) -> None:
        if self._instructions.record("too_long", time.monotonic()):
            self.logger.warning(
                f"instruction refused ({len(text)} characters, more than "
                f"instruction_max_chars {max_chars}): '{excerpt(text)}'; the current one "
                f"stays [{refused_total} so far]")

    def instruction_taken(self, text: str, reading: Reading) -> None:
        """A new instruction: what the policy reads of it, or why it holds (said once)."""
        if not text:
            self.logger.warning("empty instruction: refusing to act until a new one")
        elif reading.reason:
            self.logger.warning(f"holding: {excerpt(reading.reason)}")
        elif reading.sentence != text:
            self.logger.info(f"instruction: '{excerpt(text)}', read as '{reading.sentence}' "
                             "(takes effect at the next chunk)")
        else:
            self.logger.info(f"instruction: '{excerpt(text)}' (takes effect at the next chunk)")

    def instructions_coalesced(self, min_interval_s: float, coalesced_total: int) -> None:
        if coalesced_total and self._instructions.record("coalesced", time.monotonic()):
            self.logger.info(
                f"instructions arrive more often than every instruction_min_interval_s "
                f"({min_interval_s:g} s): only the newest is taken "
                f"[{coalesced_total} coalesced so far]")

    def incompatible_publisher(self, topic: str, publisher: str) -> None:
        self.logger.warning(f"{topic}: publisher '{publisher}' offers QoS (best effort or "
                            "volatile) that this reliable subscription cannot take: no "
                            "observations from it")

    def rule_events(self, events: Iterable[RuleEvent]) -> None:
        """Motions the policy did not command: each one said (a few per task at most)."""
        for event in events:
            line = (f"chunk rule ({event.kind}, observation at {event.stamp_s:.2f} s): "
                    f"{event.message}")
            if event.kind in RULE_WARNINGS:
                self.logger.warning(line)
            else:
                self.logger.info(line)
