"""The words instructions are made of: which mean each colour, shape, size and place.

Each meaning has the words training sentences draw from (``seen``) and words kept out
of every training sentence (``held_out``), so an evaluation can ask with words the
policy never read. The resolver (``referring``) understands both: it is the scorer, and a
scorer must know what a person means whatever the policy learnt.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Words:
    """The words for one meaning."""

    seen: tuple[str, ...]
    held_out: tuple[str, ...] = ()

    @property
    def all(self) -> tuple[str, ...]:
        return self.seen + self.held_out


#: Canonical colour (the ``<colour>`` of an object name) -> its words.
COLOURS = {
    "red": Words(("red",), ("scarlet", "crimson")),
    "green": Words(("green",), ("emerald",)),
    "blue": Words(("blue",), ("azure", "navy")),
    "yellow": Words(("yellow",), ("golden",)),
    "purple": Words(("purple", "violet"), ("lilac",)),
}
#: Canonical shape (the ``<shape>`` of an object name) -> its nouns.
SHAPES = {
    "cube": Words(("cube", "block", "box"), ("brick",)),
    "cylinder": Words(("cylinder", "can"), ("tube",)),
    "sphere": Words(("sphere", "ball"), ("globe",)),
}
#: Nouns that stand for any object ("the one on the left", "the leftmost object").
ANY_OBJECT = Words(("one", "object", "thing"), ("item",))
#: Size words: small (the smaller / smallest of the candidates) and large.
SIZES = {
    "small": Words(("small", "smaller", "smallest", "little"), ("tiny", "tinier", "tiniest")),
    "large": Words(("large", "larger", "largest", "big", "bigger", "biggest"),
                   ("huge", "chunky")),
}
#: Places among the candidates, as the person sees them (``referring.Viewpoint``).
PLACES = {
    "left": Words(("left", "leftmost"), ("port",)),
    "right": Words(("right", "rightmost"), ("starboard",)),
    "near": Words(("nearest", "closest"), ("nearer", "closer")),
    "far": Words(("farthest", "furthest"), ("farther", "further")),
    "middle": Words(("middle", "centre", "center"), ("central",)),
}
#: Words that put the reference next to another object: "the cube next to the ball".
BESIDE = Words(("beside", "next", "by", "near"), ("alongside",))
#: Words that make an instruction a correction of the one before: "no, the blue one".
CORRECTION = Words(("no", "not", "wrong", "instead", "actually", "meant"), ("nope", "rather"))
#: "the other one": the candidate the previous instruction did not choose.
OTHER = Words(("other",), ("another",))


def word_meanings(table: dict[str, Words]) -> dict[str, str]:
    """Every word of ``table`` (seen and held out) -> its meaning."""
    return {w: meaning for meaning, words in table.items() for w in words.all}


def seen_words(table: dict[str, Words]) -> dict[str, tuple[str, ...]]:
    """Meaning -> the words training sentences use for it."""
    return {meaning: words.seen for meaning, words in table.items()}


def describe(object_name: str) -> tuple[str, str]:
    """(colour, shape) of an object named ``<colour>_<shape>[_<tag>]`` (``red_cube``,
    ``red_cube_small``), the naming of the simulated objects and of demonstrations'
    targets."""
    colour, shape = ([*object_name.split("_"), ""])[:2]
    if colour not in COLOURS or shape not in SHAPES:
        raise ValueError(f"object '{object_name}' is not named <colour>_<shape>[_<tag>] with "
                         f"a known colour {sorted(COLOURS)} and shape {sorted(SHAPES)}")
    return colour, shape
