"""A Prefect server backed by PostgreSQL (issue 68): a throw-away cluster of Debian's PostgreSQL on loopback
(`flows.services.database`, what `make database` runs). `cfgen with-server` runs a stage on a temporary server over
it, and a lasting `prefect server start` over it takes `cfgen serve`'s scheduled deployment and two stage commands at
once; every run is in PostgreSQL and no SQLite database is made."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from flows import services
from flows.engine.process import PrefectUnavailable
from flows.engine.server import check_reachable
from tasks.core.errors import UserError
from tests.conftest import ROOT, requires_nltk
from tests.flows.test_cli import one_row_parquet

pytestmark = requires_nltk


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """The cluster's SQLAlchemy URL. Its folder is outside pytest's (mode 700) tree: as root, PostgreSQL runs as
    `postgres`, which must pass through every parent. Without PostgreSQL the tests skip, except under CI=true."""
    try:
        services.postgres_program("initdb")
    except UserError as missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {missing}")
        pytest.skip(str(missing))
    folder = Path(tempfile.mkdtemp(prefix="cfgen-postgres-"))
    folder.chmod(0o755)
    try:
        with services.database(folder / "cluster", services.free_port()) as url:
            yield url
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def query(url: str, sql: str) -> list[tuple]:
    async def fetch():
        connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return [tuple(row) for row in await connection.fetch(sql)]
        finally:
            await connection.close()

    return asyncio.run(fetch())


def completed_runs(url: str) -> int:
    """Flow runs completed on this database (0 before a server has made its tables)."""
    try:
        return query(url, "SELECT count(*) FROM flow_run WHERE state_type = 'COMPLETED'")[0][0]
    except asyncpg.UndefinedTableError:
        return 0


def project(folder: Path) -> Path:
    """A folder with params.yaml and one caption for `cfgen sites`."""
    from tasks.text.ingest import SCHEMA

    folder.mkdir(parents=True)
    shutil.copy(ROOT / "params.yaml", folder / "params.yaml")
    one_row_parquet(folder / "captions.parquet", SCHEMA, caption="a dog on a mat")
    return folder


def env_on(database: str, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return {**env, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(home), "PREFECT_API_DATABASE_CONNECTION_URL": database,
            **extra}


def cfgen(folder: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "flows.cli", *args], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def finished(process: subprocess.Popen) -> str:
    out, _ = process.communicate(timeout=600)
    assert process.returncode == 0, out[-4000:]
    return out


def test_with_server_runs_a_stage_on_a_temporary_server_over_postgresql(tmp_path, database):
    before = completed_runs(database)
    folder = project(tmp_path / "a")
    finished(cfgen(folder, env_on(database, tmp_path / "home"), "with-server", "--", sys.executable, "-m",
                   "flows.cli", "sites", "captions.parquet", "out.parquet"))
    assert (folder / "out.parquet").exists()
    assert completed_runs(database) > before
    assert not list((tmp_path / "home").rglob("*.db"))  # no SQLite beside it


@pytest.fixture
def lasting_server(tmp_path, database) -> Iterator[str]:
    """`prefect server start` over the cluster (`services.prefect_server`): its API URL."""
    with services.prefect_server(database, tmp_path / "server-home", services.free_port()) as url:
        yield url


def test_a_lasting_server_over_postgresql_keeps_the_schedule_and_two_stages_at_once(tmp_path, database,
                                                                                   lasting_server):
    (tmp_path / "serve").mkdir()
    shutil.copy(ROOT / "params.yaml", tmp_path / "serve" / "params.yaml")
    (tmp_path / "serve" / "captions.tsv").write_text("a_0\tA dog on a couch.\n")
    env = env_on(database, tmp_path / "home", PREFECT_API_URL=lasting_server)
    serving = cfgen(tmp_path / "serve", env, "serve", "--name", "nightly", "--cron", "0 3 * * *", "--source",
                    "captions.tsv")
    try:
        deadline = time.monotonic() + 180
        while not (crons := query(database, "SELECT s.schedule->>'cron' FROM deployment d JOIN deployment_schedule s "
                                            "ON s.deployment_id = d.id WHERE d.name = 'nightly'")):
            assert serving.poll() is None and time.monotonic() < deadline, serving.stdout.read()[-3000:]
            time.sleep(1)
        assert crons == [("0 3 * * *",)]
        before = completed_runs(database)
        stages = [cfgen(project(tmp_path / name), env, "sites", "captions.parquet", "out.parquet")
                  for name in ("one", "two")]
        for stage in stages:
            finished(stage)
    finally:
        os.killpg(serving.pid, signal.SIGTERM)
        serving.wait(timeout=60)
    assert all((tmp_path / name / "out.parquet").exists() for name in ("one", "two"))
    assert completed_runs(database) >= before + 2
    assert not list((tmp_path / "home").rglob("*.db")) and not list((tmp_path / "server-home").rglob("*.db"))


def test_two_workers_of_one_scheduled_deployment_render_nothing_twice(tmp_path, lasting_server):
    """Both workers take a run of the same deployment at once, on a cold shared store: both complete, and no sample
    or unit task is computed twice (`benchmarks/two_workers.py` runs ten, on PostgreSQL and SQLite)."""
    from benchmarks.two_workers import run

    outcome = run(tmp_path, lasting_server, runs=2, captions=2)
    assert outcome.states == {"COMPLETED": 2} and outcome.taken == (1, 1), outcome
    assert outcome.samples_rendered > 0 and outcome.units_computed > 0, outcome
    assert outcome.rendered_twice == 0 and outcome.computed_twice == 0, outcome
