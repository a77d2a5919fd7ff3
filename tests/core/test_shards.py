"""Content-defined shards: boundaries depend on content, groups never split, order preserved."""

from pathlib import Path

import polars as pl
import pytest

from tasks.core.fingerprints import ModelNotFound, fingerprint
from tasks.core.keys import unit
from tasks.core.shards import content_shards, shard_content
from tasks.core.specs import ModelSpec, model_specs
from tasks.stages import stage
from tasks.text.params import CandidatesParams, SitesParams


def shard_key(stage, shard: pl.DataFrame, section, *extra: str) -> str:
    """A caption shard's key as `flows.engine.sharding.run_sharded` builds it."""
    return unit(stage.name, stage.entries, section, [s for _, s in model_specs(section)]).key(shard_content(shard),
                                                                                             *extra)


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
    # Many groups whose rows are far apart (a stage that emits one edit type after another) still never split.
    spread = frame(ids(200) + ids(200)[::-1])
    shards = content_shards(spread, 4)
    assert len(shards) > 10
    assert sum(s["caption_id"].n_unique() for s in shards) == 200
    assert pl.concat(shards)["caption_id"].unique(maintain_order=True).to_list() == ids(200)


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


def model_folder(path: Path, weights: bytes) -> None:
    """A tiny local model folder; its fingerprint is a hash of these bytes."""
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "roberta"}')
    (path / "model.safetensors").write_bytes(weights)


def test_cache_key_changes_with_rows_and_keyed_params():
    sites, shard = stage("sites"), frame(ids(3))
    base = shard_key(sites, shard, SitesParams())
    assert shard_key(sites, shard, SitesParams()) == base  # deterministic
    assert shard_key(sites, frame(ids(4)), SitesParams()) != base
    assert shard_key(sites, shard, SitesParams(noun_tags=("NN",))) != base
    assert shard_key(sites, shard, SitesParams(), "extra") != base


def test_cache_key_changes_with_the_code_the_stage_executes(project_copy, tmp_path):
    model_folder(tmp_path / "mlm", b"weights")
    candidates, shard = stage("candidates"), frame(ids(3))
    params = CandidatesParams(model=ModelSpec(id=str(tmp_path / "mlm")))
    base = shard_key(candidates, shard, params)
    loading = project_copy / "tasks" / "core" / "loading.py"  # candidates -> core.loading.load_pretrained
    loading.write_text(loading.read_text().replace("# ", "#  ") + "\n# a comment\n")
    assert shard_key(candidates, shard, params) == base
    loading.write_text(loading.read_text().replace("return tokenizer, model.to(device).eval()",
                                                   "return tokenizer, model.to(device).eval().float()"))
    changed = shard_key(candidates, shard, params)
    assert changed != base
    assert shard_key(candidates, shard, params) == changed


def test_cache_key_changes_with_model_content_not_with_unkeyed_params(tmp_path, monkeypatch):
    """Same spec (`models/mlm`, relative) over three real folders: the key follows the bytes, not the name."""
    candidates, shard, params = stage("candidates"), frame(ids(3)), CandidatesParams(model=ModelSpec(id="models/mlm"))

    def key_in(folder: Path, weights: bytes, section: CandidatesParams = params) -> str:
        model_folder(folder / "models" / "mlm", weights)
        monkeypatch.chdir(folder)
        fingerprint.cache_clear()  # fingerprints are cached per spec for the process; here the folder behind it moves
        return shard_key(candidates, shard, section)

    base = key_in(tmp_path / "a", b"weights-1")
    assert key_in(tmp_path / "b", b"weights-2") != base
    assert key_in(tmp_path / "c", b"weights-1") == base
    # batch_size only changes how the work is batched, never its result: not in the key; top_k is.
    assert shard_key(candidates, shard, CandidatesParams(model=params.model, batch_size=3)) == base
    assert shard_key(candidates, shard, CandidatesParams(model=params.model, top_k=3)) != base


def test_a_missing_model_fails_the_key_instead_of_keying_on_the_name(tmp_path):
    params = CandidatesParams(model=ModelSpec(id=str(tmp_path / "absent")))
    with pytest.raises(ModelNotFound):
        shard_key(stage("candidates"), frame(ids(3)), params)
