"""Content-defined shards: the unit a caption stage computes, caches and resumes.

A shard boundary falls before every group (rows sharing a `caption_id`) whose id hashes to 0 mod `shard_size`, so
boundaries depend on content, not on row numbers: appending captions touches only the tail shard and new ones, and
dropping rows changes only their own shards. A shard's key (`keys.Unit.key`) hashes its rows, less file locations
(`shard_content`).
"""

from __future__ import annotations

import hashlib

import polars as pl

GROUP = "caption_id"
LOCATIONS = ("image_path",)  # where a row's file lives, not what it holds (its digest column is keyed): never keyed


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


def shard_content(shard: pl.DataFrame) -> str:
    """What a shard's key hashes of its rows: everything but file locations."""
    return shard.drop(LOCATIONS, strict=False).write_ndjson()
