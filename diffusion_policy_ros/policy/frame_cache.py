"""``FrameFeatureCache``: per-frame encoder features kept while a frame is in the history.

With To = 2 and one chunk per frame, every frame is the newest frame of one chunk
and the older frame of the next: encoding each chunk's frames afresh encodes every
frame twice. The encoders see one frame (and, for the cloud, the instruction) only, so
their output is reused; fusion and the sampler, which mix frames and joint states, run
per chunk.

The two halves are kept apart: the image tokens depend on the image alone, so they
survive a new instruction and can be computed before the frame's cloud arrives
(``PolicyRunner.encode_image_ahead``); the cloud's tokens and grounded target depend
on the instruction as well. An entry is known by the identity of its arrays (the
observation history hands the same arrays to every chunk that uses the frame) and,
for the cloud, the instruction. The cache keeps a reference to those arrays, so an
identity cannot be reused by a new array while its entry lives; entries beyond
``capacity`` are dropped oldest first.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

import numpy as np
import torch

Features = dict[str, torch.Tensor]


class _IdentityLru:
    """Least-recently-used map from (array identities, tag) to features."""

    def __init__(self, capacity: int):
        self.capacity = max(1, int(capacity))
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    def _entry(self, arrays: tuple[np.ndarray, ...], tag: str) -> tuple | None:
        entry = self._entries.get((*map(id, arrays), tag))
        if entry is None or any(a is not b for a, b in zip(entry[0], arrays, strict=True)):
            return None
        return entry

    def contains(self, arrays: tuple[np.ndarray, ...], tag: str = "") -> bool:
        """Whether ``get`` would hit (not counted)."""
        return self._entry(arrays, tag) is not None

    def get(self, arrays: tuple[np.ndarray, ...], tag: str = "") -> Features | None:
        entry = self._entry(arrays, tag)
        if entry is None:
            self.misses += 1
            return None
        self._entries.move_to_end((*map(id, arrays), tag))
        self.hits += 1
        return entry[1]

    def put(self, arrays: tuple[np.ndarray, ...], features: Features, tag: str = "") -> None:
        key = (*map(id, arrays), tag)
        self._entries[key] = (arrays, features)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


class FrameFeatureCache:
    """The image and cloud features of the frames in use, each half cached on its own."""

    def __init__(self, capacity: int):
        self.images = _IdentityLru(capacity)
        self.clouds = _IdentityLru(capacity)

    def image(self, obs: Mapping[str, np.ndarray]) -> Features | None:
        return self.images.get((obs["image"],))

    def has_image(self, image: np.ndarray) -> bool:
        return self.images.contains((image,))

    def put_image(self, image: np.ndarray, features: Features) -> None:
        self.images.put((image,), features)

    def cloud(self, obs: Mapping[str, np.ndarray], instruction: str) -> Features | None:
        return self.clouds.get((obs["points"], obs["point_colors"]), instruction)

    def put_cloud(self, obs: Mapping[str, np.ndarray], instruction: str,
                  features: Features) -> None:
        self.clouds.put((obs["points"], obs["point_colors"]), features, instruction)

    def clear(self) -> None:
        self.images.clear()
        self.clouds.clear()
