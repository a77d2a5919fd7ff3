"""Content-defined shards: boundaries depend on content, groups never split, order preserved."""

import polars as pl
import pytest

from flows.sharding import content_shards, shard_key
from tasks.params import NounsParams


def frame(ids: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"caption_id": ids, "value": list(range(len(ids)))})


def ids(n: int, start: int = 0) -> list[str]:
    return [f"{i}_0" for i in range(start, start + n)]


def test_shards_partition_rows_in_order():
    f = frame(ids(500))
    shards = content_shards(f, 16)
    assert len(shards) > 10
    assert pl.concat(shards).equals(f)


def test_groups_stay_together_and_keep_first_appearance_order():
    f = frame(["b", "a", "b", "c", "a", "c"] * 20)
    shards = content_shards(f, 2)
    for g in ("a", "b", "c"):
        assert sum(g in s["caption_id"].to_list() for s in shards) == 1
    assert pl.concat(shards)["caption_id"].unique(maintain_order=True).to_list() == ["b", "a", "c"]


def test_appending_rows_leaves_every_earlier_shard_but_the_tail_unchanged():
    before = content_shards(frame(ids(1000)), 64)
    after = content_shards(frame(ids(1010)), 64)
    changed = [s for s in after if not any(s.equals(b) for b in before)]
    assert len(changed) == 1  # the tail shard, now holding the 10 new rows as well
    assert changed[0]["caption_id"].to_list()[-10:] == ids(10, 1000)


def test_dropping_a_row_changes_only_its_shard():
    full = frame(ids(400))
    before = content_shards(full, 16)
    after = content_shards(full.filter(pl.col("caption_id") != "200_0"), 16)
    assert sum(not any(s.equals(b) for b in before) for s in after) == 1


def test_empty_frame_has_no_shards():
    assert content_shards(frame([]), 8) == []


@pytest.mark.parametrize("change", ["rows", "params", "code", "model"])
def test_cache_key_changes_with_each_ingredient(change):
    shard, params, code, prints = frame(ids(3)), NounsParams(), "code-v1", ["model@rev1"]
    base = shard_key("nouns", shard, params, code, prints)
    changed = {
        "rows": lambda: shard_key("nouns", frame(ids(4)), params, code, prints),
        "params": lambda: shard_key("nouns", shard, NounsParams(tags=("NN",)), code, prints),
        "code": lambda: shard_key("nouns", shard, params, "code-v2", prints),
        "model": lambda: shard_key("nouns", shard, params, code, ["model@rev2"]),
    }[change]()
    assert changed != base
    assert shard_key("nouns", shard, params, code, prints) == base
