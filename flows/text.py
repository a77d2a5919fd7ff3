"""Caption-engine flows: (ingest: `flows.ingest`) -> sites -> saliency -> candidates -> relations -> similarity ->
perplexity.

Each step is runnable alone (`stage_flow`, what the DVC stages call) on a parquet of the previous step's schema, and
`captions_flow` chains them for any caption file. Every step writes its output, `<output>.rejects.parquet` and a
metrics dict (row counts, rejects by reason, shards computed vs. taken from the cache).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import polars as pl
from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner

from flows.engine.counters import stage_metrics
from flows.engine.sharding import run_sharded
from flows.ingest import ingest_task
from tasks.core.fingerprints import content_hash
from tasks.core.images import source_image_paths
from tasks.core.io import read_frame, write_outputs
from tasks.core.params import PathsParams
from tasks.core.schemas import Schema
from tasks.stages import Params, caption_steps, skip_reason, step


def with_source_images(sites: pl.DataFrame, paths: PathsParams) -> pl.DataFrame:
    """`sites` plus each caption's real image (`image_path`, absolute: a Dask worker has another working directory;
    null when missing) and its content hash, which a shard's cache key covers in place of the path."""
    ids = sites["image_id"].unique(maintain_order=True).to_list()
    found = dict(zip(ids, source_image_paths(ids, paths.source_images, paths.source_image_name)))
    hashes = {i: content_hash(p) for i, p in found.items() if p}
    return sites.with_columns(
        image_path=pl.col("image_id").replace_strict({i: str(p.resolve()) for i, p in found.items() if p}, default=None,
                                                     return_dtype=pl.String),
        image_digest=pl.col("image_id").replace_strict(hashes, default=None, return_dtype=pl.String))


def run_step(name: str, source: Path, output: Path, params: Params) -> dict:
    declared = step(name)
    declared.logic  # imported whether its shards compute, come from the cache or pass through: in its DVC code deps
    frame = read_frame(source, cast(Schema, declared.input), cast(str, declared.after))  # a caption step has both
    if reason := skip_reason(name, params):
        get_run_logger().info("%s skipped (%s): its %d rows pass through", name, reason, frame.height)
        write_outputs(frame, pl.DataFrame(schema=declared.rejects), output)
        return stage_metrics(name, frame.height, frame, pl.DataFrame(schema=declared.rejects), skipped=reason)
    if name == "saliency":
        frame = with_source_images(frame, params.paths)
    result = run_sharded(declared, frame, params)
    write_outputs(result.kept, result.rejects, output)
    get_run_logger().info("%s: %d rows in, %d out, %d/%d shards computed", name, frame.height,
                          result.kept.height, result.shards_computed, result.shards)
    return stage_metrics(name, frame.height, result.kept, result.rejects, shards=result.shards,
                         shards_computed=result.shards_computed)


@flow(name="caption-stage", task_runner=ThreadPoolTaskRunner(max_workers=1))  # type: ignore[arg-type]  # prefect#16938
def stage_flow(name: str, source: Path, output: Path, params: Params) -> dict:
    """One caption step over `source`, written to `output` (+ rejects); returns its metrics."""
    return run_step(name, source, output, params)


def intermediate(output: Path, name: str) -> Path:
    """Where `captions_flow` keeps a step's output: `<output stem>_steps/<stage>.parquet`."""
    return output.parent / f"{output.stem}_steps" / f"{name}.parquet"


@flow(name="captions", task_runner=ThreadPoolTaskRunner(max_workers=1))  # type: ignore[arg-type]  # prefect#16938
def captions_flow(source: Path, output: Path, params: Params) -> list[dict]:
    """Every caption step on any caption file; intermediates and their rejects kept beside `output`."""
    metrics = [ingest_task(source, intermediate(output, "ingest"))]
    previous = intermediate(output, "ingest")
    steps = caption_steps()
    for name in steps:
        target = output if name == steps[-1] else intermediate(output, name)
        metrics.append(run_step(name, previous, target, params))
        previous = target
    return metrics
