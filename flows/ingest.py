"""The ingest stage's flow: a caption file read once, no model and no shards, so it imports none of the engine's
caching or sharding."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from flows.engine.counters import stage_metrics
from tasks.core.io import write_outputs


@task
def ingest_task(source: Path, output: Path) -> dict:
    """Ingest needs no model and no shards: it reads the file once."""
    from tasks.text.ingest import read_captions  # here: the other caption stages never run ingest's code

    kept, rejects = read_captions(source)
    write_outputs(kept, rejects, output)
    return stage_metrics("ingest", kept.height + rejects.height, kept, rejects)
