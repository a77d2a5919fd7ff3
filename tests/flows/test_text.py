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

from flows.engine.counters import run_log
from flows.text import captions_flow, stage_flow
from tasks.core.io import rejects_path
from tasks.core.params import EngineParams
from tasks.core.shards import content_shards
from tasks.core.writing import write_frame
from tasks.text.ingest import read_captions
from tasks.text.params import SitesParams
from tasks.text.relations import relation
from tests.conftest import COCO_CAPTIONS, DEMO_CAPTIONS, ROOT, crash_on_call, requires_coco, requires_nltk

pytestmark = requires_nltk


def coco_captions(n: int) -> pl.DataFrame:
    return read_captions(COCO_CAPTIONS)[0].head(n)


def test_rerun_takes_every_shard_from_the_cache(tmp_path, result_store, caption_params):
    source = tmp_path / "captions.parquet"
    write_frame(read_captions(DEMO_CAPTIONS)[0], source)
    first = stage_flow("sites", source, tmp_path / "a.parquet", caption_params)
    second = stage_flow("sites", source, tmp_path / "b.parquet", caption_params)
    assert first["shards"] > 3 and first["shards_computed"] == first["shards"]
    assert second["shards_computed"] == 0
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_changed_params_recompute(tmp_path, result_store, caption_params):
    source = tmp_path / "captions.parquet"
    write_frame(read_captions(DEMO_CAPTIONS)[0], source)
    stage_flow("sites", source, tmp_path / "a.parquet", caption_params)
    narrowed = caption_params.model_copy(update={"sites": SitesParams(types=caption_params.sites.types,
                                                                      noun_tags=("NN",))})
    again = stage_flow("sites", source, tmp_path / "b.parquet", narrowed)
    assert again["shards_computed"] == again["shards"]
    nouns = pl.read_parquet(tmp_path / "b.parquet").filter(pl.col("edit_type") == "noun")
    assert set(nouns["tag"]) == {"NN"}


@requires_coco
def test_appending_ten_captions_to_a_thousand_computes_only_the_new_shard(tmp_path, result_store,
                                                                          caption_params):
    raw = caption_params.model_copy(update={"engine": EngineParams(shard_size=64)})
    write_frame(coco_captions(1000), tmp_path / "1000.parquet")
    write_frame(coco_captions(1010), tmp_path / "1010.parquet")
    first = stage_flow("sites", tmp_path / "1000.parquet", tmp_path / "a.parquet", raw)
    second = stage_flow("sites", tmp_path / "1010.parquet", tmp_path / "b.parquet", raw)
    new_shards = second["shards"] - first["shards"]
    assert second["shards_computed"] == 1 + new_shards <= 2  # the tail shard (grown by the 10) + any new one
    fresh = tmp_path / "fresh"
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

    with temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: fresh}):
        stage_flow("sites", tmp_path / "1010.parquet", tmp_path / "c.parquet", raw)
    assert (tmp_path / "b.parquet").read_bytes() == (tmp_path / "c.parquet").read_bytes()


def test_a_crashed_run_resumes_with_only_the_unfinished_shards(tmp_path, result_store, caption_params,
                                                               monkeypatch):
    import tasks.text.candidates

    sites = tmp_path / "sites.parquet"
    _demo_sites(tmp_path, caption_params, sites)
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
    return source, tmp_path / "sites.parquet"


def _demo_sites(tmp_path: Path, raw, target: Path) -> None:
    source, _ = _demo_source(tmp_path)
    stage_flow("sites", source, target, raw)


def test_captions_flow_end_to_end(tmp_path, result_store, caption_params):
    output = tmp_path / "out" / "counterfactual_captions.parquet"
    metrics = captions_flow(DEMO_CAPTIONS, output, caption_params)
    assert [m["stage"] for m in metrics] == ["ingest", "sites", "saliency", "candidates", "relations", "similarity",
                                             "perplexity"]
    assert metrics[2]["skipped"] == "saliency.enabled is false" and metrics[2]["rows_out"] == metrics[1]["rows_out"]
    result = pl.read_parquet(output)
    assert result.height > 0 and result["caption_id"].is_unique().all()
    for row in result.iter_rows(named=True):
        c, s, e = row["caption"], row["start"], row["end"]
        assert row["counterfactual"] == c[:s] + row["substitute"] + c[e:]
        assert c[s:e] == row["original_word"] and row["substitute"].casefold() != row["original_word"].casefold()
        lower, upper = caption_params.similarity.window(row["edit_type"])  # a swap's own upper bound: 1.0
        assert lower < row["similarity"] <= upper
        if row["edit_type"] == "noun":  # relations.reject: all three by default
            assert relation(row["original_word"], row["substitute"]) is None
    steps = output.parent / "counterfactual_captions_steps"
    assert {p.name for p in steps.iterdir()} >= {"sites.parquet", "candidates.rejects.parquet"}
    assert set(result["edit_type"]) == set(caption_params.sites.types)  # the demo runs every type
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
    subprocess.run([*cli, "sites", str(captions), "sites.parquet", *overrides], cwd=tmp_path, env=env, check=True)
    args = [*cli, "candidates", "sites.parquet", "out.parquet", "--metrics", "m.json", *overrides]
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
    metrics = yaml.safe_load(run_log(tmp_path / "m.json").read_text())
    assert 0 < metrics["shards_computed"] < metrics["shards"]
    clean_env = {**env, "PREFECT_HOME": str(tmp_path / "prefect-clean")}
    subprocess.run([*cli, "candidates", "sites.parquet", "clean.parquet", *overrides], cwd=tmp_path, env=clean_env,
                   check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert (tmp_path / "out.parquet").read_bytes() == (tmp_path / "clean.parquet").read_bytes()


def test_saliency_is_skipped_without_real_images_and_passes_every_site(tmp_path, result_store, caption_params):
    source, sites = _demo_source(tmp_path)
    stage_flow("sites", source, sites, caption_params)
    enabled = caption_params.model_copy(update={
        "saliency": caption_params.saliency.model_copy(update={"enabled": True}),
        "paths": caption_params.paths.model_copy(update={"source_images": None})})
    metrics = stage_flow("saliency", sites, tmp_path / "salient.parquet", enabled)
    assert metrics["skipped"] == "paths.source_images is not set: no real images to rank with"
    assert pl.read_parquet(tmp_path / "salient.parquet").equals(pl.read_parquet(sites))
    assert pl.read_parquet(rejects_path(tmp_path / "salient.parquet")).is_empty()


def test_saliency_with_real_images_is_cached_by_their_pixels(tmp_path, result_store, caption_params):
    import numpy as np
    from PIL import Image

    from tasks.demo.tiny_eval import build_tiny_hf_clip

    source, sites = _demo_source(tmp_path)
    stage_flow("sites", source, sites, caption_params)
    frame = pl.read_parquet(sites)
    images = tmp_path / "coco"
    images.mkdir()
    ids = frame["image_id"].unique(maintain_order=True).to_list()
    rng = np.random.default_rng(0)
    for image_id in ids[:-3]:  # the last three images are missing: their sites all stay
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(images / f"{image_id}.png")
    spec = build_tiny_hf_clip(tmp_path / "hf_clip", seed=0)
    params = caption_params.model_copy(update={
        "saliency": caption_params.saliency.model_copy(update={"enabled": True, "model": spec, "min_score": -1.0}),
        "paths": caption_params.paths.model_copy(update={"source_images": images,
                                                         "source_image_name": "{image_id}.png"})})
    first = stage_flow("saliency", sites, tmp_path / "a.parquet", params)
    kept, rejects = pl.read_parquet(tmp_path / "a.parquet"), pl.read_parquet(rejects_path(tmp_path / "a.parquet"))
    assert first["shards_computed"] == first["shards"] > 1 and "skipped" not in first
    assert kept.height + rejects.height == frame.height and set(rejects["reason"]) == {"not_salient"}
    assert kept.columns == frame.columns
    missing = set(ids[-3:])
    assert frame.filter(pl.col("image_id").is_in(missing)).equals(kept.filter(pl.col("image_id").is_in(missing)))
    again = stage_flow("saliency", sites, tmp_path / "b.parquet", params)
    assert again["shards_computed"] == 0
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(images / f"{ids[0]}.png")  # new pixels, same file name
    changed = stage_flow("saliency", sites, tmp_path / "c.parquet", params)
    holding = sum(ids[0] in shard["image_id"] for shard in content_shards(frame, params.engine.shard_size))
    assert changed["shards_computed"] == holding < changed["shards"]
