"""Content-defined shards and their cache keys: the unit a caption stage computes, caches and resumes.

A shard boundary falls before every group (rows sharing a `caption_id`) whose id hashes to 0 mod `shard_size`, so
boundaries depend on content, not on row numbers: appending captions touches only the tail shard and new ones, and
dropping rows changes only their own shards. A shard's key hashes its rows (less file locations) + the stage's
keyed params + the contents of its models + the code its `run` and `load_models` execute and the versions of the
libraries that code calls (`code.identity`): all that fixes its output.
"""

from __future__ import annotations

import hashlib
import json

import polars as pl
from pydantic import BaseModel

from tasks.core.code import identity
from tasks.core.fields import keyed_dump
from tasks.core.fingerprints import model_fingerprints
from tasks.core.stages import Stage

GROUP = "caption_id"
LOCATIONS = ("image_path",)  # where a row's file lives, not what it holds (its digest column is keyed): never keyed


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
    frame = frame.with_columns(_row=pl.int_range(pl.len())).sort(pl.col("_row").min().over(GROUP),
                                                                 maintain_order=True).drop("_row")
    cut = {g: int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest()) % shard_size == 0
           for g in frame[GROUP].unique()}
    starts = frame[GROUP] != frame[GROUP].shift(1)
    boundary = [bool(s) and cut[g] for s, g in zip(starts.fill_null(True), frame[GROUP])]
    shard_no = pl.Series(boundary, dtype=pl.Int32).cum_sum()
    return frame.with_columns(_shard=shard_no).partition_by("_shard", maintain_order=True, include_key=False)


def shard_keys(stage: Stage, shards: list[pl.DataFrame], section: BaseModel, *extra: str) -> list[str]:
    """Each shard's rows + keyed params + model contents + the code the stage runs and its libraries (+ `extra`): all
    that fixes a shard's output. What the shards share is computed once, not per shard."""
    shared = [json.dumps(keyed_dump(section), sort_keys=True), identity(*stage.entries).key,
              *model_fingerprints(section), *extra]
    return [f"{stage.name}-" + digest(shard.drop(LOCATIONS, strict=False).write_ndjson(), *shared) for shard in shards]
