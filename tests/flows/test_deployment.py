"""The scheduled deployment on a real (temporary) Prefect server: registered with its cron, triggered, completed, its
sharded stages, generate and selection run on the Dask cluster named by `engine.dask_address` (`cfgen serve -p`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import polars as pl
import pytest

from flows.engine.counters import run_log
from tests.conftest import ROOT, WORLD_CAPTIONS, requires_nltk
from tests.flows.test_dag_dask import SHARDED, Cluster, assert_ran_on_workers, dask_cluster, recording

pytestmark = [requires_nltk, pytest.mark.slow]
DEPLOYMENT = "cfgen-dataset/nightly"


def wait_for_deployment(client, name: str, serving: subprocess.Popen, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if serving.poll() is not None:
            raise AssertionError(f"cfgen serve exited with {serving.returncode}")
        try:
            return client.read_deployment_by_name(name)
        except Exception:  # ObjectNotFound until `serve` has registered it
            time.sleep(1)
    raise AssertionError(f"deployment {name} never appeared")


@pytest.fixture
def cluster(tmp_path, prefect_server) -> Iterator[Cluster]:
    """A scheduler and two workers, each in a directory of its own under the one `cfgen serve` runs in."""
    yield from dask_cluster(tmp_path)


def test_scheduled_deployment_runs_the_whole_dag_on_the_dask_cluster(tmp_path, cluster):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL

    shutil.copy2(ROOT / "params.yaml", tmp_path / "params.yaml")
    source = tmp_path / "incoming.tsv"
    source.write_text("\n".join(WORLD_CAPTIONS.read_text().splitlines()[:8]) + "\n")
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(),
           "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(tmp_path / "store")}
    engine = (f"engine.dask_address={cluster.address}", "engine.shard_size=2", "engine.torch_threads=1")
    serving = subprocess.Popen([sys.executable, "-m", "flows.cli", "serve", "--name", "nightly", "--cron", "0 3 * * *",
                                "--source", str(source), "--profile", "demo",
                                *(arg for option in engine for arg in ("-p", option))],
                               cwd=tmp_path, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=(tmp_path / "serve.log").open("w"))
    try:
        with get_client(sync_client=True) as client:
            deployment = wait_for_deployment(client, DEPLOYMENT, serving)
            assert [s.schedule.cron for s in deployment.schedules] == ["0 3 * * *"]
            assert deployment.parameters["source"] == str(source)
            assert deployment.parameters["overrides"] == list(engine)
        with recording(cluster) as recorded:
            run = run_deployment(DEPLOYMENT, timeout=600)
        assert run.state.is_completed(), (tmp_path / "serve.log").read_text()[-3000:]
    finally:
        os.killpg(serving.pid, signal.SIGTERM)
        serving.wait(timeout=60)

    computed = assert_ran_on_workers(cluster, recorded, serving.pid)
    for stage in SHARDED:  # a fresh store: every shard computed, each on a worker
        metrics = json.loads(run_log(tmp_path / "reports/metrics" / f"{stage}.json").read_text())
        assert computed[stage] == metrics["shards_computed"] == metrics["shards"] > 0, (stage, computed, metrics)
    assert computed["generate_pairs"] > 0 and computed["render_canonicals"] > 0, computed
    exported = pl.read_parquet(tmp_path / "data/export/data/*.parquet")
    selected = pl.read_parquet(tmp_path / "data/processed/selected.parquet")
    assert exported.height == selected.height > 0
    assert set(exported["id"]) <= {line.split("\t")[0] for line in source.read_text().splitlines()}
    assert (tmp_path / "data/export/README.md").read_text().startswith("---")
