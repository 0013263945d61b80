"""Colour-swap augmentation: new (scene, instruction) pairs from every demonstration.

A policy learns which object an instruction names only from the pairs it sees:
400 demonstrations are 400 scenes, and learning "blue" -> the blue object's
place measured slow (a grounding head trained alone on the first frames of 200
episodes still missed the grasp pose by 0.26 rad after 300 steps, 0.36 rad on
held-out episodes, against 0.45 rad for predicting the mean). Swapping the
object colours of a scene, and the colour word of its instruction with them,
keeps every action valid (the same physical object is grasped) while the words
now point at a differently coloured object: each demonstration becomes up to
(3! x 2!) = 12 pairs with the shipped objects.

Colours are only swapped within a group (objects of one shape), so the shape
word stays true. A pixel or point belongs to a colour class when it is
saturated (``min_saturation``) and its chromaticity (rgb / sum) is within
``max_chroma_distance`` of the class's base colour, the nearest one; it is
recoloured by the per-channel ratio of the new base colour to the old one,
which keeps the shading. Everything else (arm, table, floor) stays as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from diffusion_policy_ros.instructions.vocabulary import COLOURS, describe, seen_words

_SEEN_COLOUR_WORDS = seen_words(COLOURS)

_EPS = 0.02

SCENE_OBJECT_RGB = {
    "red_cube": (0.85, 0.1, 0.1),
    "green_cube": (0.1, 0.7, 0.15),
    "blue_cube": (0.1, 0.25, 0.9),
    "yellow_cylinder": (0.95, 0.85, 0.1),
    "purple_cylinder": (0.6, 0.2, 0.75),
}
"""Base colour (rgb in [0, 1]) of every graspable object of the shipped scene, by name
(``<colour>_<shape>``), apart from the simulator: training reads no MuJoCo model.
``sim/assets/arm.xml`` is the source; test/learning/test_augmentation.py keeps the two
equal."""


class ColourSwap:
    """Permute object colours within groups, in images, point colours and the instruction."""

    def __init__(self, base_rgb: dict[str, Sequence[float]], groups: Sequence[Sequence[str]],
                 min_saturation: float = 0.3, max_chroma_distance: float = 0.12):
        """``base_rgb``: canonical colour -> base colour in [0, 1]; ``groups``: colours that
        may trade places (e.g. those of the cubes)."""
        self.colours = list(base_rgb)
        self.base = np.array([base_rgb[c] for c in self.colours], dtype=np.float32)
        self.chroma = self.base / self.base.sum(axis=1, keepdims=True)
        self.groups = [list(g) for g in groups if len(g) > 1]
        self.min_saturation = min_saturation
        self.max_chroma_distance = max_chroma_distance
        words = {w: c for c, ws in _SEEN_COLOUR_WORDS.items() for w in ws}
        self._word_colour = {w: c for w, c in words.items() if c in base_rgb}
        self._word_re = re.compile(r"\b(" + "|".join(sorted(self._word_colour)) + r")\b")

    @classmethod
    def from_objects(cls, object_rgb: Mapping[str, Sequence[float]] = SCENE_OBJECT_RGB,
                     **thresholds) -> ColourSwap:
        """Classes and groups from objects named ``<colour>_<shape>`` and their base
        colours (default: the shipped scene's)."""
        base: dict[str, Sequence[float]] = {}
        by_shape: dict[str, list[str]] = {}
        for name, rgb in object_rgb.items():
            colour, shape = describe(name)
            base[colour] = list(rgb)[:3]
            by_shape.setdefault(shape, []).append(colour)
        return cls(base, list(by_shape.values()), **thresholds)

    def sample(self, rng: np.random.Generator) -> dict[str, str]:
        """A random permutation within each group (old colour -> new colour)."""
        mapping = {c: c for c in self.colours}
        for group in self.groups:
            for old, new in zip(group, rng.permutation(group), strict=True):
                mapping[old] = str(new)
        return mapping

    def classify(self, rgb: np.ndarray) -> np.ndarray:
        """(..., 3) uint8 -> (...) index into ``colours``, -1 for unsaturated."""
        x = rgb.astype(np.float32) / 255.0
        saturation = x.max(axis=-1) - x.min(axis=-1)
        chroma = x / np.maximum(x.sum(axis=-1, keepdims=True), 1e-6)
        d = ((chroma[..., None, :] - self.chroma) ** 2).sum(axis=-1)
        cls = d.argmin(axis=-1)
        far = np.take_along_axis(d, cls[..., None], axis=-1)[..., 0] > self.max_chroma_distance ** 2
        cls[(saturation < self.min_saturation) | far] = -1
        return cls

    def recolour(self, rgb: np.ndarray, mapping: dict[str, str]) -> np.ndarray:
        """A recoloured copy of (..., 3) uint8 colours."""
        gain = np.ones((len(self.colours) + 1, 3), dtype=np.float32)  # last row: unclassified
        for i, c in enumerate(self.colours):
            j = self.colours.index(mapping.get(c, c))
            gain[i] = (self.base[j] + _EPS) / (self.base[i] + _EPS)
        cls = self.classify(rgb)
        out = rgb.astype(np.float32) * gain[cls]
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)

    def instruction(self, text: str, mapping: dict[str, str]) -> str:
        """``text`` with every colour word replaced by the first word of its new colour."""
        def swap(m: re.Match) -> str:
            colour = self._word_colour[m.group(1)]
            new = mapping.get(colour, colour)
            return m.group(1) if new == colour else _SEEN_COLOUR_WORDS[new][0]
        return self._word_re.sub(swap, text)

    def instruction_variants(self, text: str) -> set[str]:
        """Every instruction ``text`` can become (for embedding them ahead of training)."""
        out = {text}
        for group in self.groups:
            for old in group:
                for new in group:
                    out.add(self.instruction(text, {old: new}))
        return out
