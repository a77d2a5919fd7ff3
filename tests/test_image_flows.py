"""Image flows: per-pair caching, appended pairs, crash resume, lost store, regeneration at filter time, Dask == local."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from flows.captions import task_runner
from flows.images import filter_flow, generate_flow
from flows.io import write_frame
from tasks.params import EngineParams
from tests.conftest import crash_on_call
from tests.image_fixtures import PAIRS

pytest_plugins = ["tests.image_fixtures"]
MORE = pl.DataFrame({"caption_id": ["p2"], "image_id": ["i2"], "caption": ["a horse in a field"],
                     "counterfactual": ["a cow in a field"]})


@pytest.fixture
def raw(tiny_specs) -> dict:
    diffusion, clip = tiny_specs
    return {"profile": "demo", "engine": {"shard_size": 1, "torch_threads": 1},
            "generate": {"diffusion": diffusion.model_dump(), "vae": None, "clip": clip.model_dump(), "size": 32,
                         "steps": 2, "n_samples": 3, "batch_samples": 3, "top_k_images": 1},
            "filter": {"min_text_image_o": -1.0, "min_text_image_c": -1.0, "min_image_image": -1.0,
                       "min_clip_dir": -1.0}}


def pairs_file(tmp_path: Path, frame: pl.DataFrame, name: str = "pairs.parquet") -> Path:
    write_frame(frame, tmp_path / name)
    return tmp_path / name


def test_rerun_and_appended_pairs_generate_only_new_pairs(tmp_path, result_store, raw):
    images = tmp_path / "images"
    first = generate_flow(pairs_file(tmp_path, PAIRS), tmp_path / "a.parquet", images, raw)
    again = generate_flow(pairs_file(tmp_path, PAIRS), tmp_path / "b.parquet", images, raw)
    grown = generate_flow(pairs_file(tmp_path, pl.concat([PAIRS, MORE]), "more.parquet"), tmp_path / "c.parquet",
                          images, raw)
    assert (first["pairs_generated"], again["pairs_generated"], grown["pairs_generated"]) == (2, 0, 1)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert pl.read_parquet(tmp_path / "c.parquet").head(6).equals(pl.read_parquet(tmp_path / "a.parquet"))


def test_a_lost_image_store_regenerates_instead_of_replaying_dead_paths(tmp_path, result_store, raw):
    images = tmp_path / "images"
    source = pairs_file(tmp_path, PAIRS)
    generate_flow(source, tmp_path / "a.parquet", images, raw)
    stored = sorted(p.relative_to(images) for p in images.rglob("*.png"))
    shutil.rmtree(images)
    again = generate_flow(source, tmp_path / "b.parquet", images, raw)
    assert again["pairs_generated"] == 2
    assert sorted(p.relative_to(images) for p in images.rglob("*.png")) == stored


def test_a_crashed_generation_resumes_without_regenerating_finished_pairs(tmp_path, result_store, raw,
                                                                         monkeypatch):
    import tasks.generate

    source = pairs_file(tmp_path, pl.concat([PAIRS, MORE]))
    with monkeypatch.context() as patched:
        crash_on_call(patched, tasks.generate, 2)
        with pytest.raises(RuntimeError, match="simulated crash"):
            generate_flow(source, tmp_path / "out.parquet", tmp_path / "images", raw)
    resumed = generate_flow(source, tmp_path / "out.parquet", tmp_path / "images", raw)
    assert resumed["pairs_generated"] == 1 and resumed["pairs"] == 3


def test_filter_regenerates_winners_that_were_never_stored(tmp_path, result_store, raw):
    images, selected_images = tmp_path / "images", tmp_path / "selected"
    unstored = {**raw, "generate": {**raw["generate"], "top_k_images": 0}}
    generate_flow(pairs_file(tmp_path, PAIRS), tmp_path / "scores.parquet", images, unstored)
    assert not list(images.rglob("*.png"))
    metrics = filter_flow(tmp_path / "scores.parquet", tmp_path / "sel.parquet", images, selected_images, unstored)
    selected = pl.read_parquet(tmp_path / "sel.parquet")
    assert metrics["accepted"] == metrics["regenerated"] == 2
    for row in selected.iter_rows(named=True):
        assert (images / row["image_o"]).read_bytes() == (selected_images / row["image_o"]).read_bytes()
        assert (selected_images / row["image_c"]).exists()

    stored = {**raw, "generate": {**raw["generate"], "top_k_images": 3}}
    generate_flow(pairs_file(tmp_path, PAIRS), tmp_path / "scores3.parquet", tmp_path / "images3", stored)
    for row in selected.iter_rows(named=True):  # the same sample stored at generation: the same bytes
        assert (tmp_path / "images3" / row["image_o"]).read_bytes() == (images / row["image_o"]).read_bytes()


def test_refiltering_with_new_thresholds_generates_nothing(tmp_path, result_store, raw):
    generate_flow(pairs_file(tmp_path, PAIRS), tmp_path / "scores.parquet", tmp_path / "images", raw)
    strict = {**raw, "filter": {**raw["filter"], "min_image_image": 1.01}}
    metrics = filter_flow(tmp_path / "scores.parquet", tmp_path / "sel.parquet", tmp_path / "images",
                          tmp_path / "selected", strict)
    assert metrics["accepted"] == 0 and metrics["rejects"] == {"no_sample_passed": 2}
    assert metrics["regenerated"] == 0


@pytest.mark.slow
def test_dask_cluster_of_two_workers_gives_the_local_result(tmp_path, result_store, raw):
    from distributed import LocalCluster

    source = pairs_file(tmp_path, pl.concat([PAIRS, MORE]))
    local = generate_flow(source, tmp_path / "local.parquet", tmp_path / "local_images", raw)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        dask_raw = {**raw, "engine": {**raw["engine"], "dask_address": cluster.scheduler_address}}
        runner = task_runner(EngineParams(**dask_raw["engine"]))
        with_dask = generate_flow.with_options(task_runner=runner)
        from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

        with temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: tmp_path / "dask-store"}):
            remote = with_dask(source, tmp_path / "dask.parquet", tmp_path / "dask_images", dask_raw)
    assert local["pairs_generated"] == remote["pairs_generated"] == 3
    assert pl.read_parquet(tmp_path / "local.parquet").equals(pl.read_parquet(tmp_path / "dask.parquet"))
    local_pngs = sorted(p.relative_to(tmp_path / "local_images") for p in (tmp_path / "local_images").rglob("*.png"))
    assert local_pngs == sorted(p.relative_to(tmp_path / "dask_images")
                                for p in (tmp_path / "dask_images").rglob("*.png"))
    for path in local_pngs:
        assert (tmp_path / "local_images" / path).read_bytes() == (tmp_path / "dask_images" / path).read_bytes()
