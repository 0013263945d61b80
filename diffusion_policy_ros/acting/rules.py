"""Chunk rules: what an acting loop may do to the policy's chunk before it is executed.

A rule (``ChunkRule``) sees each chunk with the measured joint positions and the stamp
of the observation the chunk answers, in stamp order, and hands back the chunk to
execute: the same one, or a changed copy. It keeps state across chunks (how long a
gripper has been closed, a lift in progress), which a new task clears (``restart``).
``ChunkRules`` runs a task's rules in their order: while one of them holds the chunk
(a lift under way), it alone sees it; otherwise each rule takes the previous one's
output. What they did beyond passing the chunk on comes back as ``RuleEvent``s, for an
operator's log; each rule counts its own (``statistics``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

import numpy as np

#: Stamps this close count as equal (s): 10 Hz observations reach 0.5 s exactly.
STAMP_TOLERANCE_S = 1e-6


@dataclasses.dataclass(frozen=True)
class RuleEvent:
    """A rule overriding the policy: ``kind`` names what it did, ``stamp_s`` is the stamp
    of the observation the chunk answers. Rules act a few times per task at most, so an
    acting loop can log every event without flooding."""

    kind: str
    stamp_s: float
    message: str


class ChunkRule(Protocol):
    """One rule; ``last_event`` is what its last ``apply`` did, if anything worth a log."""

    last_event: RuleEvent | None

    def restart(self) -> None:
        """A new task (instruction or episode): forget what earlier chunks showed."""

    def holds(self, stamp_s: float) -> bool:
        """Whether this rule owns the chunk for an observation at ``stamp_s`` (a motion of
        its own under way), so that no other rule may change it."""

    def apply(self, chunk: np.ndarray, joint_positions: np.ndarray,
              stamp_s: float) -> np.ndarray:
        """The (T, D) chunk to execute for an observation at ``stamp_s`` with the measured
        ``joint_positions`` (the chunk's columns)."""

    def statistics(self) -> dict[str, int]:
        """Counters over every task, by name, for diagnostics and reports."""


class ChunkRules:
    """The rules of one acting loop, applied in order; empty = the chunks pass unchanged."""

    def __init__(self, rules: Sequence[ChunkRule] = ()):
        self.rules = list(rules)
        #: What the rules did in the last ``apply``.
        self.events: list[RuleEvent] = []

    def __bool__(self) -> bool:
        return bool(self.rules)

    def restart(self) -> None:
        for rule in self.rules:
            rule.restart()

    def apply(self, chunk: np.ndarray, joint_positions: np.ndarray,
              stamp_s: float) -> np.ndarray:
        self.events = []
        holder = next((rule for rule in self.rules if rule.holds(stamp_s)), None)
        for rule in [holder] if holder is not None else self.rules:
            chunk = rule.apply(chunk, joint_positions, stamp_s)
            if rule.last_event is not None:
                self.events.append(rule.last_event)
        return chunk

    def statistics(self) -> dict[str, int]:
        return {name: n for rule in self.rules for name, n in rule.statistics().items()}
