"""Content-defined shards and their Prefect-cached execution.

A shard boundary falls before every group (rows sharing a `caption_id`) whose id hashes to 0 mod `shard_size`, so
boundaries depend on content, not on row numbers: appending captions touches only the tail shard and new ones, and
dropping rows changes only their own shards. A shard's cache key hashes its rows + the stage's keyed params + the
contents of its models + the source of every project module the stage can run (`code.closure`), so a rerun
recomputes exactly the shards whose inputs changed, and a killed run resumes from the shards it had finished (each
shard's result is persisted as soon as it completes).
"""

from __future__ import annotations

import hashlib
import importlib
import json
from dataclasses import dataclass

import polars as pl
from prefect import task
from prefect.futures import as_completed
from prefect.utilities.annotations import unmapped
from pydantic import BaseModel

from flows.progress import StageProgress
from tasks.code import code_digest
from tasks.models import model_fingerprints, set_torch_threads
from tasks.params import Params, keyed_dump
from tasks.stages import Stage

GROUP = "caption_id"


def digest(*parts: str | bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def content_shards(frame: pl.DataFrame, shard_size: int) -> list[pl.DataFrame]:
    """Split `frame` into shards; a group's rows stay together, groups keep first-appearance order."""
    if frame.is_empty():
        return []
    frame = frame.sort(pl.int_range(pl.len()).min().over(GROUP), maintain_order=True)
    cut = {g: int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest()) % shard_size == 0
           for g in frame[GROUP].unique()}
    starts = frame[GROUP] != frame[GROUP].shift(1)
    boundary = [bool(s) and cut[g] for s, g in zip(starts.fill_null(True), frame[GROUP])]
    shard_no = pl.Series(boundary, dtype=pl.Int32).cum_sum()
    return frame.with_columns(_shard=shard_no).partition_by("_shard", maintain_order=True, include_key=False)


def shard_key(stage: Stage, shard: pl.DataFrame, section: BaseModel, *extra: str) -> str:
    """Rows + keyed params + model contents + the code the stage runs (+ `extra`): all that fixes a shard's output."""
    return f"{stage.name}-" + digest(shard.write_ndjson(), json.dumps(keyed_dump(section), sort_keys=True),
                                     code_digest(stage.logic), *model_fingerprints(section), *extra)


@task(cache_key_fn=lambda context, parameters: parameters["key"], persist_result=True)
def run_shard(stage: Stage, shard: pl.DataFrame, section: BaseModel, key: str,
              torch_threads: int | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One shard through a stage; the models come from the stage's per-process loader cache."""
    set_torch_threads(torch_threads)
    logic = importlib.import_module(stage.logic)
    return logic.run(shard, section, logic.load_models(section))


@dataclass(frozen=True)
class ShardedResult:
    kept: pl.DataFrame
    rejects: pl.DataFrame
    shards: int
    shards_computed: int


def run_sharded(stage: Stage, frame: pl.DataFrame, params: Params) -> ShardedResult:
    """Map a stage over content-defined shards (on the current flow's task runner) and concatenate in order."""
    section, engine = stage.section(params), params.engine
    shards = content_shards(frame, engine.shard_size)
    keys = [shard_key(stage, s, section) for s in shards]
    with StageProgress(stage.name, len(shards), unit="shards") as progress:
        futures = run_shard.with_options(name=stage.name).map(
            shard=shards, key=keys, stage=unmapped(stage), section=unmapped(section),
            torch_threads=unmapped(engine.torch_threads))
        for _ in as_completed(futures):
            progress.advance()
    results = [f.result() for f in futures]
    kept = pl.concat([r[0] for r in results]) if results else pl.DataFrame(schema=stage.output)
    rejects = pl.concat([r[1] for r in results]) if results else pl.DataFrame(schema=stage.rejects)
    return ShardedResult(kept, rejects, len(shards), sum(f.state.name != "Cached" for f in futures))
