"""What generate appended to a result store's pair records (`tasks.image.records`): the samples it rendered."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path


def persisted(store: Path) -> list[dict]:
    """The sample lines generate has appended to its pair records (selection's canonical renders, kept there too,
    left out), complete lines only."""
    lines = []
    for record in (store / "samples").rglob("*.jsonl"):
        for line in filter(None, record.read_text(encoding="utf-8").split("\n")):
            with contextlib.suppress(ValueError):  # a line being appended right now
                lines.append(json.loads(line))
    return [entry for entry in lines if not entry["key"].startswith("canonical-")]


def persisted_samples(store: Path) -> int:
    """Samples persisted; asserts none was appended twice."""
    keys = [entry["key"] for entry in persisted(store)]
    assert len(set(keys)) == len(keys), "a sample was rendered twice"
    return len(keys)
