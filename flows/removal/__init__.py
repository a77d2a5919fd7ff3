"""Object-removal flows, a module per stage: masks -> captions -> inpaint -> selection -> export.

Each reads and writes the files `paths` names and writes its metrics to `paths.metrics/<stage>.json`; a stage imports
only its own logic module, so editing one reruns only that stage and those downstream of it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from prefect import get_run_logger

from flows.engine.counters import stage_metrics, write_metrics
from tasks.core.io import write_outputs
from tasks.stages import Params


def finish(name: str, rows_in: int, kept: pl.DataFrame, rejects: pl.DataFrame, output: Path, params: Params,
            **extra) -> dict:
    write_outputs(kept, rejects, output)
    metrics = stage_metrics(name, rows_in, kept, rejects, **extra)
    write_metrics(metrics, params.paths.metrics / f"{name}.json")
    get_run_logger().info("%s: %d in, %d out, rejects %s", name, rows_in, kept.height, metrics["rejects"])
    return metrics
