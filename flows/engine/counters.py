"""A run's counters in the metrics files that DVC tracks.

A stage's metrics hold COUNTERS (what this run computed vs. took from the cache) beside facts about its outputs. DVC
writes a stage's metrics only when it runs the stage, so they count the run that made its outputs. `cfgen run` runs
every stage: `counts_kept` puts back each metrics file whose facts the run left as they were, so a run of an
up-to-date workspace modifies no tracked file (its own counts are in the summary it prints).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tasks.core.io import write_file

COUNTERS = frozenset({"pairs_generated", "samples_rendered", "renders", "renders_cached", "edits_filled",
                      "edits_cached", "shards_computed", "pairs_asked", "pairs_cached", "pairs_checked"})


def facts(metrics: Any) -> Any:
    """A metrics document less the COUNTERS of every stage's metrics in it (a dict with a "stage" key)."""
    if isinstance(metrics, dict):
        dropped = COUNTERS if "stage" in metrics else set()
        return {k: facts(v) for k, v in metrics.items() if k not in dropped}
    return [facts(v) for v in metrics] if isinstance(metrics, list) else metrics


@contextlib.contextmanager
def counts_kept(files: list[Path]) -> Iterator[None]:
    """On exit, however the block ends, each of `files` (JSON) that it rewrote with the same facts gets its bytes
    back."""
    before = {path: path.read_bytes() for path in files if path.is_file()}
    try:
        yield
    finally:
        for path, old in before.items():
            with contextlib.suppress(OSError, ValueError):  # gone or torn: the run's own outcome stands
                if (new := path.read_bytes()) != old and facts(json.loads(new)) == facts(json.loads(old)):
                    write_file(path, lambda staged: staged.write_bytes(old))
