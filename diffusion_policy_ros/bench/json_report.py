"""The ``--json`` file every benchmark can write next to its printed table."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path: str | Path | None, payload) -> None:
    """Write ``payload`` (rows or a report dict) as indented JSON to ``path``; no path, no
    file."""
    if path:
        Path(path).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
