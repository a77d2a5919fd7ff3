"""`cfgen run`'s whole-DAG flow honours `engine.dask_address`: on a 2-worker LocalCluster it writes exactly what a
local run writes, and every sharded stage really ran on the cluster (nothing came from a shared cache)."""

from __future__ import annotations

import shutil

import polars as pl
import pytest

from flows.pipeline import run_dag
from tests.conftest import DEMO_CAPTIONS, ROOT, project_params, requires_nltk

pytestmark = [requires_nltk, pytest.mark.slow]
OUTPUTS = ("sites", "salient_sites", "candidates", "similarity", "counterfactual_captions", "samples", "selected")


def run_in(folder, monkeypatch, *overrides: str) -> dict:
    """The whole DAG on 8 demo captions in `folder`, with its own Prefect result store."""
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

    (folder / "data/raw").mkdir(parents=True)
    (folder / "data/raw/demo_captions.tsv").write_text("\n".join(DEMO_CAPTIONS.read_text().splitlines()[:8]) + "\n")
    shutil.copy(ROOT / "params.yaml", folder / "params.yaml")
    monkeypatch.chdir(folder)
    params = project_params("engine.torch_threads=1", "engine.shard_size=2", *overrides)
    with temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: folder / "store"}):
        return run_dag(params)


def test_the_whole_dag_on_a_dask_cluster_equals_a_local_run(tmp_path, prefect_server, monkeypatch):
    from distributed import LocalCluster

    local = run_in(tmp_path / "local", monkeypatch)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = run_in(tmp_path / "dask", monkeypatch, f"engine.dask_address={cluster.scheduler_address}")
    for stage in ("sites", "candidates", "similarity", "perplexity"):
        assert remote[stage]["shards_computed"] == remote[stage]["shards"] > 0, stage
    assert remote["generate"]["samples_rendered"] == local["generate"]["samples_rendered"] > 0
    paths = project_params().paths
    for name in OUTPUTS:
        a, b = (pl.read_parquet(tmp_path / run / getattr(paths, name)) for run in ("local", "dask"))
        assert a.equals(b), name
    images = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local" / paths.selected_images).rglob("*"))
    assert images and all((tmp_path / "local" / p).read_bytes() == (tmp_path / "dask" / p).read_bytes()
                          for p in images if p.suffix == ".png")
