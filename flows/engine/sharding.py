"""Prefect execution of stages: where their tasks run, their metrics, and a caption stage over content-defined shards
(`tasks.core.shards`), one cached task per shard.

A shard's result is persisted under its content key as soon as it completes, so a rerun recomputes exactly the
shards whose inputs changed and a killed run resumes from the shards it had finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl
from prefect.futures import as_completed
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import unmapped
from pydantic import BaseModel

from flows.engine.caching import in_store, unit_task
from flows.engine.progress import StageProgress
from tasks.core import keys
from tasks.core.loading import release_models, set_torch_threads
from tasks.core.shards import content_shards, shard_content
from tasks.core.specs import model_specs
from tasks.stages import Params, Stage


class LocalTaskRunner(ThreadPoolTaskRunner):
    """Prefect's thread pool, releasing the models its tasks loaded (`release_models`) when its flow run ends."""

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        release_models()


def task_runner(params: Params):
    """Local by default (one shard at a time: the models already use every core); the Dask cluster at
    `engine.dask_address` when one is set (`flows.engine.cluster`: under the paper profile, one GPU per worker, unless
    every model that runs pins its device). Either releases the stage's models when its flow run ends: a flow run
    enters a duplicate of its task runner and leaves it once its tasks are done."""
    engine = params.engine
    if not engine.dask_address:
        return LocalTaskRunner(max_workers=1)
    from prefect.settings import PREFECT_API_URL

    from flows.engine.cluster import ClusterTaskRunner, check_api_reachable

    check_api_reachable(engine.dask_address, PREFECT_API_URL.value() or "")
    pinned = all(spec.device != "auto" for _, spec in params.running_models()) if params.profile == "paper" else None
    return ClusterTaskRunner(engine.dask_address, engine.task_resources, pinned)


@unit_task
def run_shard(stage: Stage, shard: pl.DataFrame, section: BaseModel, unit: keys.Unit, content: str,
              torch_threads: int | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One shard through a stage; the models come from the stage's per-process loader cache."""
    set_torch_threads(torch_threads)
    logic = stage.logic
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
    specs = [spec for _, spec in model_specs(section)]
    with StageProgress(stage.name, len(shards), unit="shards") as progress:
        futures = in_store(run_shard, params, name=stage.name).map(
            shard=shards, content=[shard_content(s) for s in shards], stage=unmapped(stage),
            section=unmapped(section), unit=unmapped(keys.unit(stage.name, stage.entries, section, specs)),
            torch_threads=unmapped(engine.torch_threads))
        for _ in as_completed(futures):
            progress.advance()
    results = [f.result() for f in futures]
    kept = pl.concat([r[0] for r in results]) if results else pl.DataFrame(schema=stage.output)
    rejects = pl.concat([r[1] for r in results]) if results else pl.DataFrame(schema=stage.rejects)
    return ShardedResult(in_caption_order(kept, frame), in_caption_order(rejects, frame), len(shards),
                         sum(f.state.name != "Cached" for f in futures))


def in_caption_order(out: pl.DataFrame, frame: pl.DataFrame) -> pl.DataFrame:
    """`out`'s rows in the order of their captions in the stage's input `frame`, each caption's rows in the order
    its shard gave them: a stage that lists, say, all of a shard's rejects of one kind first gives the same bytes
    whatever the shard size."""
    at = {caption: n for n, caption in enumerate(frame["caption_id"].unique(maintain_order=True))}
    return out.sort(pl.col("caption_id").replace_strict(at, return_dtype=pl.UInt32), maintain_order=True)
