"""Corrections resolved against what was said before: "pick up the red cube" ... "no, the
blue one" / "the other one" / "the one on the left".

``Dialogue.hear`` turns each instruction into a ``Resolution`` of the scene as it is now.
A correction inherits the kind of object the instruction before asked for (its shape, or
any object) and rules out the object it chose, then takes its own words: "no, the blue
one" after "the red cube" is the blue cube; "the other one" after "the yellow cylinder"
is the other cylinder. A correction with nothing before it to correct is refused
(``NOTHING_TO_CORRECT``), and so is one whose words fit nothing.

``Dialogue.instruction()`` is the words of the task in force, for a policy that reads a
whole sentence: "pick up the blue cube" after the correction above.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from diffusion_policy_ros.instructions.referring import (
    NAMES_NOTHING,
    NOTHING_TO_CORRECT,
    Reference,
    Referent,
    Resolution,
    ResolverConfig,
    parse_reference,
    resolve,
)


def _without_kind(ref: Reference) -> bool:
    """"the blue one", "the one on the left": a kind of object left to the context."""
    return ref.any_object and ref.shape is None and ref.beside is None


class Dialogue:
    """The instructions of one task so far and the object they settled on."""

    def __init__(self, config: ResolverConfig | None = None):
        self.config = config or ResolverConfig()
        self.reference: Reference | None = None
        """The reference in force (the last that resolved), None before the first."""
        self.target: str | None = None
        self.phrase = ""
        """Canonical words for the object in force ("the blue cube")."""

    def reset(self) -> None:
        """A new task: nothing said yet."""
        self.reference, self.target, self.phrase = None, None, ""

    def hear(self, text: str, objects: Sequence[Referent]) -> Resolution:
        """Resolve ``text`` after what was said; a resolved one becomes the one in force,
        a refused one leaves it as it was."""
        said = parse_reference(text)
        corrects = said.correction or said.other
        if corrects and self.target is None:
            return Resolution(NOTHING_TO_CORRECT, None, (),
                              "a correction, but no instruction before it to correct", said)
        candidates = [o for o in objects if not corrects or o.name != self.target]
        resolution = resolve(said, candidates, self.config)
        if self.reference is not None and (corrects or _without_kind(said)):
            # The kind of object asked for before, unless nothing of that kind fits.
            kind = dataclasses.replace(said, shape=said.shape or self.reference.shape,
                                       any_object=True)
            in_kind = resolve(kind, candidates, self.config)
            if in_kind.status != NAMES_NOTHING or resolution.status == NAMES_NOTHING:
                resolution = in_kind
        if resolution.ok and resolution.target is not None:
            self.settle(resolution.reference, resolution.target, objects)
        return resolution

    def settle(self, reference: Reference, target: str, objects: Sequence[Referent]) -> None:
        """Put ``target``, asked for with ``reference``, in force (a task given whole, as
        a simulated episode's own)."""
        chosen = next(o for o in objects if o.name == target)
        # Remembered with the chosen object's kind: what "the other one" is among.
        self.reference = dataclasses.replace(reference, shape=chosen.shape)
        self.target = chosen.name
        self.phrase = _phrase(reference, chosen, objects)

    def instruction(self, verb: str = "pick up") -> str:
        """The task in force in canonical words ('' before the first)."""
        return f"{verb} {self.phrase}" if self.phrase else ""


def _phrase(ref: Reference, chosen: Referent, objects: Sequence[Referent]) -> str:
    """"the <colour> <shape>" when that names the chosen object alone, else the words
    that chose it."""
    if sum(o.colour == chosen.colour and o.shape == chosen.shape for o in objects) == 1:
        return f"the {chosen.colour} {chosen.shape}"
    return ref.phrase()


@dataclasses.dataclass(frozen=True)
class Reading:
    """What a policy that sees no scene objects makes of an instruction: the sentence to
    condition on, or '' and why it holds."""

    sentence: str
    reason: str = ""

    def status(self) -> str:
        """One line for a person: what the policy acts on, or why it holds."""
        if self.reason:
            return f"holding: {self.reason}"
        return f"acting on '{self.sentence}'" if self.sentence else "waiting for an instruction"


class WordsDialogue:
    """The dialogue for a policy that reads words, not the scene: an instruction that
    names an object passes as it was said (the policy reads it); a correction of the
    kind "no, the blue one" becomes the sentence of the object in force ("pick up the blue
    cube"); words that name no object, name it twice over, or correct nothing are held
    with a reason. What needs the scene ("the other one", "the cube" among three) is the
    policy's to ground, or the scorer's (``Dialogue``) to refuse."""

    def __init__(self) -> None:
        self.reference: Reference | None = None

    def reset(self) -> None:
        self.reference = None

    def read(self, text: str) -> Reading:
        said = parse_reference(text)
        corrects = said.correction or said.other
        if said.problem:
            return Reading("", f"the instruction {said.problem}: '{text}'")
        if corrects and self.reference is None:
            return Reading("", f"a correction, but nothing before it to correct: '{text}'")
        if said.other:
            return Reading("", f"'{text}' needs the scene's objects to resolve; name the "
                               "object instead")
        if corrects or _without_kind(said):
            if self.reference is None:
                return Reading(text)  # "the one on the left": any object, as said
            said = dataclasses.replace(said, shape=said.shape or self.reference.shape,
                                       correction=False)
            self.reference = said
            return Reading(f"pick up {said.phrase()}")
        if not said.says_anything:
            return Reading("", f"the instruction names no object: '{text}'")
        self.reference = said
        return Reading(text)
