"""Which object an instruction means: parse its referring expression, resolve it in a scene.

``parse_reference`` reads what the words ask for: colour, shape, size, a place as the
person sees the table (left, right, nearest, farthest, middle), another object it is
next to, words it excludes ("not the red one"), and whether it corrects the instruction
before ("no, the blue one", "the other one": ``dialogue``). ``resolve`` finds the one
object of a scene that fits, or says why there is none: nothing fits, or several do and
nothing tells them apart (an ambiguous instruction must hold the arm, not move towards
a guess).

Places and sizes are relative to the candidates ("the left cylinder" of two cylinders is
the one further to the person's left), and are only taken when the candidates differ by
a margin a person would see (``ResolverConfig``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import numpy as np

from diffusion_policy_ros.instructions.vocabulary import (
    ANY_OBJECT,
    BESIDE,
    COLOURS,
    CORRECTION,
    OTHER,
    PLACES,
    SHAPES,
    SIZES,
    word_meanings,
)

_COLOUR = word_meanings(COLOURS)
_SHAPE = word_meanings(SHAPES)
_SIZE = word_meanings(SIZES)
_PLACE = word_meanings(PLACES)
_ANY = frozenset(ANY_OBJECT.all)
_BESIDE = frozenset(BESIDE.all)
_CORRECTION = frozenset(CORRECTION.all)
_OTHER = frozenset(OTHER.all)
#: Words after which "can" is the modal verb ("can you ..."), not a noun.
_PRONOUNS = frozenset({"you", "i", "we", "it"})

OK = "ok"
NAMES_NOTHING = "names_nothing"
AMBIGUOUS = "ambiguous"
UNCLEAR = "unclear"
NOTHING_TO_CORRECT = "nothing_to_correct"


@dataclasses.dataclass(frozen=True)
class Reference:
    """What an instruction's words ask for; None: not said."""

    colour: str | None = None
    shape: str | None = None
    size: str | None = None
    """``small`` or ``large``: the smallest / largest of the candidates."""
    place: str | None = None
    """``left``, ``right``, ``near``, ``far`` or ``middle``, as the person sees it."""
    beside: Reference | None = None
    """The object it is next to ("the cube next to the ball")."""
    excluded: tuple[Reference, ...] = ()
    """What it says it is not ("not the red one")."""
    correction: bool = False
    """It corrects the previous instruction ("no, ...", "I meant ...")."""
    other: bool = False
    """"the other one": a candidate of the previous instruction other than its choice."""
    any_object: bool = False
    """It says "one", "object" or "thing" where a shape would be."""
    problem: str = ""
    """Why the words cannot name one object (two colours, two shapes), or ''."""

    @property
    def says_anything(self) -> bool:
        """It speaks of an object: an attribute, a relation or a noun for any object."""
        return any(v is not None for v in (self.colour, self.shape, self.size, self.place,
                                           self.beside)) or bool(self.excluded) \
            or self.any_object

    def phrase(self) -> str:
        """Canonical words for it: "the small red cube on the left"."""
        words = [w for w in (self.size, self.colour) if w]
        words.append(self.shape or "object")
        text = "the " + " ".join(words)
        if self.place:
            text += {"near": " nearest to you", "far": " farthest from you",
                     "middle": " in the middle"}.get(self.place, f" on the {self.place}")
        if self.beside is not None:
            text += f" next to {self.beside.phrase()}"
        return text


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z]+|,", text.lower())


def _attributes(tokens: Sequence[str]) -> dict:
    """Colour, shape, size and place of one stretch of words."""
    colours = {_COLOUR[t] for t in tokens if t in _COLOUR}
    shapes = {_SHAPE[t] for i, t in enumerate(tokens) if t in _SHAPE
              and not (t == "can" and i + 1 < len(tokens) and tokens[i + 1] in _PRONOUNS)}
    sizes = {_SIZE[t] for t in tokens if t in _SIZE}
    places = {_PLACE[t] for t in tokens if t in _PLACE}
    problems = [f"names {len(found)} {kind}s ({', '.join(sorted(found))})"
                for kind, found in (("colour", colours), ("shape", shapes), ("size", sizes),
                                    ("place", places)) if len(found) > 1]
    return {"colour": _one(colours), "shape": _one(shapes), "size": _one(sizes),
            "place": _one(places), "any_object": any(t in _ANY for t in tokens),
            "problem": "; ".join(problems)}


def _one(found: set[str]) -> str | None:
    return next(iter(found)) if len(found) == 1 else None


def _beside_at(tokens: Sequence[str]) -> int | None:
    """Where a "next to" / "beside" / "by" / "near" relation starts, or None."""
    for i, t in enumerate(tokens):
        if t in _BESIDE and (t != "next" or tokens[i + 1:i + 2] == ["to"]):
            return i
    return None


def parse_reference(text: str) -> Reference:
    """The referring expression of ``text`` (what object it asks for)."""
    tokens = _tokens(text)
    correction = bool(tokens) and tokens[0] in _CORRECTION or "meant" in tokens
    other = any(t in _OTHER for t in tokens)
    # "not the red one[, the blue one]": each stretch after "not" up to a comma excludes.
    excluded, kept, i = [], [], 0
    while i < len(tokens):
        if tokens[i] == "not":
            end = tokens.index(",", i) if "," in tokens[i:] else len(tokens)
            excluded.append(Reference(**_attributes(tokens[i + 1:end])))
            i = end
        else:
            kept.append(tokens[i])
            i += 1
    at = _beside_at(kept)
    beside = None
    if at is not None:
        beside = Reference(**_attributes(kept[at + 1:]))
        kept = kept[:at]
    return Reference(**_attributes(kept), beside=beside, excluded=tuple(excluded),
                     correction=correction, other=other)


@dataclasses.dataclass(frozen=True)
class Referent:
    """An object as words can refer to it: its colour, shape, size and place."""

    name: str
    colour: str
    shape: str
    size_m: float
    """Its largest extent (m): what "small" and "large" compare."""
    position_m: tuple[float, float, float]
    """Centre in the robot's base frame (m)."""


@dataclasses.dataclass(frozen=True)
class Viewpoint:
    """Where the person stands, in the base frame (m): across the table from the robot,
    where the camera is, by default. "Left" is their left; "nearest" nearest to them."""

    position_m: tuple[float, float, float] = (1.25, 0.0, 0.8)
    looks_at_m: tuple[float, float, float] = (0.5, 0.0, 0.0)

    def right_axis(self) -> np.ndarray:
        forward = np.subtract(self.looks_at_m, self.position_m)[:2]
        forward /= np.linalg.norm(forward)
        return np.array([forward[1], -forward[0]])


@dataclasses.dataclass(frozen=True)
class ResolverConfig:
    """The differences a person sees: below them, a relation does not pick one object."""

    place_margin_m: float = 0.03
    """Two candidates closer than this along the axis a place word compares tie (m)."""
    size_margin: float = 0.08
    """Relative difference in size below which "smaller" / "larger" ties."""
    viewpoint: Viewpoint = Viewpoint()


@dataclasses.dataclass(frozen=True)
class Resolution:
    """The object an instruction means, or why none: ``status`` OK with ``target``, or
    NAMES_NOTHING, AMBIGUOUS (``candidates`` fit alike), UNCLEAR or NOTHING_TO_CORRECT."""

    status: str
    target: str | None
    candidates: tuple[str, ...]
    reason: str
    reference: Reference

    @property
    def ok(self) -> bool:
        return self.status == OK


def _fits(obj: Referent, ref: Reference) -> bool:
    return ((ref.colour is None or obj.colour == ref.colour)
            and (ref.shape is None or obj.shape == ref.shape))


def _pick(values: np.ndarray, highest: bool, margin: float) -> int | None:
    """Index of the extreme value, None if the runner-up is within ``margin``."""
    order = np.argsort(-values if highest else values, kind="stable")
    if len(order) > 1 and abs(values[order[0]] - values[order[1]]) < margin:
        return None
    return int(order[0])


def _place_index(ref: Reference, objects: Sequence[Referent],
                 config: ResolverConfig) -> int | None:
    xyz = np.array([o.position_m for o in objects], dtype=np.float64)
    view = config.viewpoint
    if ref.place in ("left", "right", "middle"):
        across = xyz[:, :2] @ view.right_axis()
        if ref.place != "middle":
            return _pick(across, ref.place == "right", config.place_margin_m)
        if len(objects) % 2 == 0:
            return None
        order = np.argsort(across)
        mid = len(order) // 2
        gaps = np.diff(across[order])
        return int(order[mid]) if min(gaps[mid - 1], gaps[mid]) >= config.place_margin_m \
            else None
    distance = np.linalg.norm(xyz[:, :2] - np.asarray(view.position_m)[:2], axis=1)
    return _pick(distance, ref.place == "far", config.place_margin_m)


def _narrow(ref: Reference, candidates: list[Referent], landmark: Referent | None,
            config: ResolverConfig) -> list[Referent]:
    """The candidates the relations keep: each relation keeps one or, on a tie, all."""
    if len(candidates) > 1 and landmark is not None:
        d = np.array([np.linalg.norm(np.subtract(o.position_m, landmark.position_m)[:2])
                      for o in candidates])
        i = _pick(d, False, config.place_margin_m)
        if i is not None:
            candidates = [candidates[i]]
    if len(candidates) > 1 and ref.size is not None:
        sizes = np.array([o.size_m for o in candidates])
        i = _pick(sizes, ref.size == "large", config.size_margin * float(sizes.max()))
        if i is not None:
            candidates = [candidates[i]]
    if len(candidates) > 1 and ref.place is not None:
        i = _place_index(ref, candidates, config)
        if i is not None:
            candidates = [candidates[i]]
    return candidates


def _excluded(ref: Reference, objects: Sequence[Referent],
              config: ResolverConfig) -> set[str]:
    """Names "not ..." rules out: the one object it means, else every object that has
    its colour and shape ("not the cubes")."""
    out: set[str] = set()
    for x in ref.excluded:
        meant = resolve(x, objects, config)
        if meant.ok and meant.target is not None:
            out.add(meant.target)
        elif x.colour or x.shape:
            out.update(o.name for o in objects if _fits(o, x))
    return out


def resolve(ref: Reference, objects: Sequence[Referent],
            config: ResolverConfig | None = None) -> Resolution:
    """The one object of ``objects`` that ``ref`` means, or why there is none."""
    config = config or ResolverConfig()
    if ref.problem:
        return Resolution(UNCLEAR, None, (), f"the instruction {ref.problem}", ref)
    if not ref.says_anything:
        return Resolution(UNCLEAR, None, (), "the instruction names no object", ref)
    landmark = None
    if ref.beside is not None:
        near = resolve(ref.beside, objects, config)
        if not near.ok:
            return dataclasses.replace(near, reason=f"next to what: {near.reason}",
                                       reference=ref)
        landmark = next(o for o in objects if o.name == near.target)
    excluded = _excluded(ref, objects, config)
    candidates = [o for o in objects if _fits(o, ref) and o is not landmark
                  and o.name not in excluded]
    if not candidates:
        return Resolution(NAMES_NOTHING, None, (),
                          f"no object in the scene is {ref.phrase()}", ref)
    kept = _narrow(ref, candidates, landmark, config)
    names = tuple(o.name for o in kept)
    if len(kept) > 1:
        return Resolution(AMBIGUOUS, None, names,
                          f"{ref.phrase()} could be any of {', '.join(names)}", ref)
    return Resolution(OK, names[0], names, "", ref)
