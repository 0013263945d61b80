"""``FrameFeatureCache``: per-frame encoder features kept while a frame is in the history.

With To = 2 and one chunk per frame, every frame is the newest frame of one chunk
and the older frame of the next: encoding each chunk's frames afresh encodes every
frame twice. The encoders (RGB CNN, PointNet, grounding) see one frame and the
instruction only, so their output is reused; fusion and the sampler, which mix
frames and joint states, run per chunk.

A frame is known by the identity of its ``image`` and ``points`` arrays (the
observation history hands the same arrays to every chunk that uses the frame) and
the instruction. The cache keeps a reference to those arrays, so an identity cannot
be reused by a new array while its entry lives; entries beyond ``capacity`` are
dropped oldest first.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

import numpy as np
import torch


class FrameFeatureCache:
    """Least-recently-used map from (frame arrays, instruction) to encoder features."""

    def __init__(self, capacity: int):
        self.capacity = max(1, int(capacity))
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _key(obs: Mapping[str, np.ndarray], instruction: str) -> tuple:
        return id(obs["image"]), id(obs["points"]), id(obs["point_colors"]), instruction

    def get(self, obs: Mapping[str, np.ndarray],
            instruction: str) -> dict[str, torch.Tensor] | None:
        key = self._key(obs, instruction)
        entry = self._entries.get(key)
        if entry is None or entry[0] is not obs["image"] or entry[1] is not obs["points"]:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry[2]

    def put(self, obs: Mapping[str, np.ndarray], instruction: str,
            features: dict[str, torch.Tensor]) -> None:
        key = self._key(obs, instruction)
        self._entries[key] = (obs["image"], obs["points"], features)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()
