"""A stage's metrics (`stage_metrics`), shown as a table (`report_table`), and its run's counters, kept out of the
metrics files that DVC tracks.

A stage's metrics hold facts about its outputs beside COUNTERS (how this run split its work, what it computed vs.
took from the cache).
`write_metrics` gives DVC the facts alone, so the tracked file (and `dvc.lock`, `dvc metrics diff`, `cfgen diff`)
depends on the outputs only, never on what a cache spared; the whole document, counters included, goes to the run
log beside it (`<stem>.run.json`), which neither DVC nor git tracks: it says what the last run computed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
from rich.table import Table

from flows.engine.console import console
from tasks.core.writing import write_json

COUNTERS = frozenset({"pairs_generated", "samples_rendered", "renders", "renders_cached", "edits_filled",
                      "edits_cached", "shards", "shards_computed", "pairs_asked", "pairs_cached", "pairs_checked"})
"""Facts of a run, not of its outputs: `shards` follows `engine.shard_size`, the rest the caches."""


def facts(metrics: Any) -> Any:
    """A metrics document less the COUNTERS of every stage's metrics in it (a dict with a "stage" key)."""
    if isinstance(metrics, dict):
        dropped = COUNTERS if "stage" in metrics else set()
        return {k: facts(v) for k, v in metrics.items() if k not in dropped}
    return [facts(v) for v in metrics] if isinstance(metrics, list) else metrics


def run_log(path: Path) -> Path:
    """Where the run that wrote the metrics file `path` left its counters."""
    return path.with_name(f"{path.stem}.run.json")


def write_metrics(metrics: dict, path: Path) -> None:
    """`path` gets the facts of `metrics` (a stage's, or several by stage name), its run log all of it."""
    write_json(facts(metrics), path)
    write_json(metrics, run_log(path))


def stage_metrics(stage: str, rows_in: int, kept: pl.DataFrame, rejects: pl.DataFrame, **extra: Any) -> dict:
    reasons = Counter(rejects["reason"].to_list()) if "reason" in rejects.columns else Counter()
    return {"stage": stage, "rows_in": rows_in, "rows_out": kept.height, "rejects": dict(sorted(reasons.items())),
            **extra}


def report_table(metrics: list[dict], path: Path | None) -> None:
    """Print a stage metrics table; with `path`, also write the metrics there (JSON: facts; counters in its run log,
    `write_metrics`)."""
    table = Table("step", "rows in", "rows out", "rejects", "counters")
    for m in metrics:
        rejects = ", ".join(f"{k}={v}" for k, v in m["rejects"].items()) or "-"
        counters = ", ".join(f"{k}={v}" for k, v in m.items() if k not in {"stage", "rows_in", "rows_out", "rejects"})
        table.add_row(m["stage"], str(m["rows_in"]), str(m["rows_out"]), rejects, counters or "-")
    console.print(table)
    if path:
        write_metrics(metrics[0] if len(metrics) == 1 else {m["stage"]: m for m in metrics}, path)
