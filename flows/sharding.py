"""Content-defined shards and their Prefect-cached execution.

A shard boundary falls before every group (rows sharing a `caption_id`) whose id hashes to 0 mod `shard_size`, so
boundaries depend on content, not on row numbers: appending captions touches only the tail shard and new ones, and
dropping rows changes only their own shards. A shard's cache key hashes its rows + the stage params + the fingerprints
of the models in those params + the stage's code, so a rerun recomputes exactly the shards whose inputs changed, and
a killed run resumes from the shards it had finished (each shard's result is persisted as soon as it completes).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import polars as pl
from prefect import task
from prefect.futures import wait
from prefect.utilities.annotations import unmapped
from pydantic import BaseModel

from tasks.models import fingerprint, set_torch_threads
from tasks.params import EngineParams, ModelSpec

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


def code_version(logic: ModuleType) -> str:
    """Source hash of a stage module and the `tasks` modules it uses."""
    used = {inspect.getmodule(v) for v in vars(logic).values()}
    modules = sorted({logic} | {m for m in used if m and m.__name__.startswith("tasks.")}, key=lambda m: m.__name__)
    return digest(*(inspect.getsource(m) for m in modules))


def model_fingerprints(params: BaseModel) -> list[str]:
    """Fingerprints of every `ModelSpec` found in `params`, in field order."""
    found = []
    for value in dict(params).values():
        if isinstance(value, ModelSpec):
            found.append(fingerprint(value))
        elif isinstance(value, BaseModel):
            found.extend(model_fingerprints(value))
    return found


def shard_key(stage: str, shard: pl.DataFrame, params: BaseModel, code: str, fingerprints: list[str],
              *extra: str) -> str:
    return f"{stage}-" + digest(shard.write_ndjson(), params.model_dump_json(), code, *fingerprints, *extra)


@task(cache_key_fn=lambda context, parameters: parameters["key"], persist_result=True)
def run_shard(module: str, shard: pl.DataFrame, params: BaseModel, key: str, kwargs: dict[str, Any],
              torch_threads: int | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One shard through a stage; the models come from the stage's per-process loader cache."""
    set_torch_threads(torch_threads)
    logic = importlib.import_module(module)
    return logic.run(shard, params, logic.load_models(params), **kwargs)


@dataclass(frozen=True)
class ShardedResult:
    kept: pl.DataFrame
    rejects: pl.DataFrame
    shards: int
    shards_computed: int


def run_sharded(stage: str, module: str, frame: pl.DataFrame, params: BaseModel, engine: EngineParams,
                shard_size: int | None = None, kwargs: dict[str, Any] | None = None, keyed: BaseModel | None = None,
                recompute: Callable[[pl.DataFrame], bool] = lambda kept: False) -> ShardedResult:
    """Map a stage over content-defined shards (on the current flow's task runner) and concatenate in order.

    `kwargs` go to the stage's `run` (only `keyed` of them counts in the cache key); a cached shard result for
    which `recompute(kept)` is true (e.g. its files are gone) is computed again.
    """
    logic = importlib.import_module(module)
    shards = content_shards(frame, shard_size or engine.shard_size)
    code, prints = code_version(logic), model_fingerprints(params)
    extra = [keyed.model_dump_json()] if keyed is not None else []
    keys = [shard_key(stage, s, params, code, prints, *extra) for s in shards]
    shard_task = run_shard.with_options(name=stage)
    fixed = {"module": module, "params": params, "kwargs": kwargs or {}, "torch_threads": engine.torch_threads}
    futures = shard_task.map(shard=shards, key=keys, **{k: unmapped(v) for k, v in fixed.items()})
    wait(futures)
    stale = [i for i, f in enumerate(futures) if f.state.name == "Cached" and recompute(f.result()[0])]
    if stale:
        redo = shard_task.with_options(refresh_cache=True).map(
            shard=[shards[i] for i in stale], key=[keys[i] for i in stale], **{k: unmapped(v) for k, v in fixed.items()})
        for i, future in zip(stale, redo):
            futures[i] = future
    wait(futures)
    results = [f.result() for f in futures]
    kept = pl.concat([r[0] for r in results]) if results else pl.DataFrame(schema=logic.SCHEMA)
    rejects = pl.concat([r[1] for r in results]) if results else pl.DataFrame(schema=logic.REJECTS_SCHEMA)
    computed = sum(f.state.name != "Cached" for f in futures)
    return ShardedResult(kept, rejects, len(shards), computed)
