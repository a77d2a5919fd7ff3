"""Caption flows: shard cache hits, incremental appends, resume after a crash or a kill, byte-identical outputs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

from flows.text import captions_flow, stage_flow
from tasks.core.io import rejects_path, write_frame
from tasks.core.params import EngineParams, NounsParams
from tasks.text.ingest import read_captions
from tasks.text.relations import relation
from tests.conftest import COCO_CAPTIONS, DEMO_CAPTIONS, ROOT, crash_on_call, requires_coco, requires_nltk

pytestmark = requires_nltk


def coco_captions(n: int) -> pl.DataFrame:
    return read_captions(COCO_CAPTIONS)[0].head(n)


def test_rerun_takes_every_shard_from_the_cache(tmp_path, result_store, caption_params):
    source = tmp_path / "captions.parquet"
    write_frame(read_captions(DEMO_CAPTIONS)[0], source)
    first = stage_flow("nouns", source, tmp_path / "a.parquet", caption_params)
    second = stage_flow("nouns", source, tmp_path / "b.parquet", caption_params)
    assert first["shards"] > 3 and first["shards_computed"] == first["shards"]
    assert second["shards_computed"] == 0
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_changed_params_recompute(tmp_path, result_store, caption_params):
    source = tmp_path / "captions.parquet"
    write_frame(read_captions(DEMO_CAPTIONS)[0], source)
    stage_flow("nouns", source, tmp_path / "a.parquet", caption_params)
    narrowed = caption_params.model_copy(update={"nouns": NounsParams(tags=("NN",))})
    again = stage_flow("nouns", source, tmp_path / "b.parquet", narrowed)
    assert again["shards_computed"] == again["shards"]
    assert set(pl.read_parquet(tmp_path / "b.parquet")["tag"]) == {"NN"}


@requires_coco
def test_appending_ten_captions_to_a_thousand_computes_only_the_new_shard(tmp_path, result_store,
                                                                          caption_params):
    raw = caption_params.model_copy(update={"engine": EngineParams(shard_size=64)})
    write_frame(coco_captions(1000), tmp_path / "1000.parquet")
    write_frame(coco_captions(1010), tmp_path / "1010.parquet")
    first = stage_flow("nouns", tmp_path / "1000.parquet", tmp_path / "a.parquet", raw)
    second = stage_flow("nouns", tmp_path / "1010.parquet", tmp_path / "b.parquet", raw)
    new_shards = second["shards"] - first["shards"]
    assert second["shards_computed"] == 1 + new_shards <= 2  # the tail shard (grown by the 10) + any new one
    fresh = tmp_path / "fresh"
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

    with temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: fresh}):
        stage_flow("nouns", tmp_path / "1010.parquet", tmp_path / "c.parquet", raw)
    assert (tmp_path / "b.parquet").read_bytes() == (tmp_path / "c.parquet").read_bytes()


def test_a_crashed_run_resumes_with_only_the_unfinished_shards(tmp_path, result_store, caption_params,
                                                               monkeypatch):
    import tasks.text.candidates

    sites = tmp_path / "nouns.parquet"
    _demo_nouns(tmp_path, caption_params, sites)
    with monkeypatch.context() as patched:
        crash_on_call(patched, tasks.text.candidates, 3)
        with pytest.raises(RuntimeError, match="simulated crash"):
            stage_flow("candidates", sites, tmp_path / "out.parquet", caption_params)
    assert not (tmp_path / "out.parquet").exists()
    resumed = stage_flow("candidates", sites, tmp_path / "out.parquet", caption_params)
    assert resumed["shards_computed"] == 1 < resumed["shards"]

    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

    with temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: tmp_path / "fresh"}):
        stage_flow("candidates", sites, tmp_path / "clean.parquet", caption_params)
    assert (tmp_path / "out.parquet").read_bytes() == (tmp_path / "clean.parquet").read_bytes()
    assert rejects_path(tmp_path / "out.parquet").read_bytes() == rejects_path(tmp_path / "clean.parquet").read_bytes()


def _demo_source(tmp_path: Path) -> tuple[Path, Path]:
    source = tmp_path / "captions.parquet"
    write_frame(read_captions(DEMO_CAPTIONS)[0], source)
    return source, tmp_path / "nouns.parquet"


def _demo_nouns(tmp_path: Path, raw, target: Path) -> None:
    source, _ = _demo_source(tmp_path)
    stage_flow("nouns", source, target, raw)


def test_captions_flow_end_to_end(tmp_path, result_store, caption_params):
    output = tmp_path / "out" / "counterfactual_captions.parquet"
    metrics = captions_flow(DEMO_CAPTIONS, output, caption_params)
    assert [m["stage"] for m in metrics] == ["ingest", "nouns", "candidates", "relations", "similarity", "perplexity"]
    result = pl.read_parquet(output)
    assert result.height > 0 and result["caption_id"].is_unique().all()
    for row in result.iter_rows(named=True):
        c, s, e = row["caption"], row["start"], row["end"]
        assert row["counterfactual"] == c[:s] + row["substitute"] + c[e:]
        assert c[s:e] == row["original_word"] and row["substitute"].casefold() != row["original_word"].casefold()
        assert 0.8 < row["similarity"] <= 0.91
        assert relation(row["original_word"], row["substitute"]) is None  # relations.reject: all three by default
    steps = output.parent / "counterfactual_captions_steps"
    assert {p.name for p in steps.iterdir()} >= {"nouns.parquet", "candidates.rejects.parquet"}
    assert metrics[-1]["rows_in"] == metrics[-2]["rows_out"]


@requires_coco
@pytest.mark.slow
def test_a_killed_cli_run_resumes_and_ends_byte_identical(tmp_path, tiny_text_models, prefect_server):
    """SIGKILL `cfgen candidates` mid-stage, rerun: finished shards are not recomputed, output identical."""
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    overrides = ["-p", "engine.shard_size=16", "-p", f"candidates.model.id={tiny_text_models['mlm']}"]
    captions = tmp_path / "captions.parquet"
    write_frame(coco_captions(300), captions)
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONPATH": str(ROOT),
           "PREFECT_API_URL": PREFECT_API_URL.value()}
    cli = [sys.executable, "-m", "flows.cli"]
    subprocess.run([*cli, "nouns", str(captions), "nouns.parquet", *overrides], cwd=tmp_path, env=env, check=True)
    args = [*cli, "candidates", "nouns.parquet", "out.parquet", "--metrics", "m.json", *overrides]
    store = tmp_path / "prefect" / "storage"
    before = len(list(store.iterdir()))
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 240
    while len(list(store.iterdir())) < before + 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "out.parquet").exists()
    subprocess.run(args, cwd=tmp_path, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = yaml.safe_load((tmp_path / "m.json").read_text())
    assert 0 < metrics["shards_computed"] < metrics["shards"]
    clean_env = {**env, "PREFECT_HOME": str(tmp_path / "prefect-clean")}
    subprocess.run([*cli, "candidates", "nouns.parquet", "clean.parquet", *overrides], cwd=tmp_path, env=clean_env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert (tmp_path / "out.parquet").read_bytes() == (tmp_path / "clean.parquet").read_bytes()
