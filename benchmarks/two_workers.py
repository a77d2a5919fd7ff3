"""Two workers of one scheduled deployment (issue 68): two `cfgen serve` processes of the same cron-scheduled
`cfgen-dataset` deployment, each in a folder of its own (as on two hosts) over one shared result store, take RUNS
flow runs triggered at once from one lasting Prefect server, one run at a time each. Printed per database
(PostgreSQL, SQLite): runs completed and failed, the runs each worker took, samples rendered (sample records) and
unit tasks computed (Prefect's task runs), and how many of either happened more than once.

    python -m benchmarks.two_workers [--runs 10] [--captions 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from flows import services

ROOT = Path(__file__).resolve().parents[1]
DEPLOYMENT = "cfgen-dataset/nightly"
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


@dataclass(frozen=True)
class Outcome:
    states: Counter          # final state type -> runs
    taken: tuple[int, ...]   # runs each worker took
    samples_rendered: int    # sample and canonical renders in the shared records
    rendered_twice: int      # of those, keys rendered more than once
    units_computed: int      # unit-task runs that computed (not read from the cache)
    computed_twice: int      # of those, computations of a key already computed (runs less keys in the store)
    wall_s: float

    def row(self, database: str) -> str:
        failed = sum(n for state, n in self.states.items() if state != "COMPLETED")
        return (f"| {database} | {self.states['COMPLETED']} | {failed} | {' + '.join(map(str, self.taken))} | "
                f"{self.samples_rendered} | {self.rendered_twice} | {self.units_computed} | {self.computed_twice} | "
                f"{self.wall_s:.0f} |")


def worker(folder: Path, source: Path, store: Path, api_url: str) -> subprocess.Popen:
    """`cfgen serve` of the deployment in `folder`, one run at a time, its results in the shared `store`."""
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "params.yaml", folder / "params.yaml")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}, "PYTHONPATH": str(ROOT),
           "PREFECT_API_URL": api_url, "PREFECT_HOME": str(folder / ".prefect"),
           "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(store), "PREFECT_RUNNER_PROCESS_LIMIT": "1"}
    with (folder / "serve.log").open("w") as log:
        return subprocess.Popen([sys.executable, "-m", "flows.cli", "serve", "--name", "nightly", "--cron",
                                 "0 3 * * *", "--source", str(source), "--profile", "demo"],
                                cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def renders(store: Path) -> Counter:
    """Sample key -> times rendered, from every line of the shared sample records."""
    lines = (line for record in (store / "samples").rglob("*.jsonl")
             for line in record.read_text().split("\n") if line)
    return Counter(json.loads(line)["key"] for line in lines)


def unit_tasks_computed(client, since: datetime) -> int:
    """Task runs started after `since` of the unit tasks (those `caching.in_store` binds) that computed rather
    than read the cache, once the server's task run recorder has stored them all (two reads 5 s apart agree)."""
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterStartTime
    from prefect.client.schemas.sorting import TaskRunSort

    from flows.engine.sharding import run_shard
    from flows.evaluation import evaluate_model, odmap_model
    from flows.judge import ask_pair
    from flows.removal.inpaint import fill_edit
    from flows.truth import check_pair

    units = {t.task_key for t in (run_shard, check_pair, ask_pair, fill_edit, evaluate_model, odmap_model)}

    def computed() -> list[tuple[str, str | None]]:
        found, page = [], None
        while page is None or len(page) == 200:
            page = client.read_task_runs(task_run_filter=TaskRunFilter(start_time=TaskRunFilterStartTime(
                after_=since)), sort=TaskRunSort.EXPECTED_START_TIME_ASC, limit=200, offset=len(found))
            found += page
        return sorted((str(t.id), t.state_name) for t in found if t.task_key in units)

    before, now = None, computed()
    while before != now:
        time.sleep(5)
        before, now = now, computed()
    return sum(state == "Completed" for _, state in now)


def began(log: str, flow_run_id) -> bool:
    """Whether the worker whose serve log is `log` ran the flow run: its engine printed the run's page. (A worker that
    lost the race names the run too, in "Aborted submission of flow run '<id>'", and ran nothing.)"""
    return f"/runs/flow-run/{flow_run_id}" in log


def run(folder: Path, api_url: str, runs: int, captions: int) -> Outcome:
    """RUNS runs of the deployment on two workers in `folder`, triggered at once; waits for all to end. The server runs
    nothing else meanwhile."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    source, store = folder / "captions.tsv", folder / "store"
    folder.mkdir(parents=True, exist_ok=True)
    world = (ROOT / "data/raw/toyworld_captions.tsv").read_text().splitlines()
    source.write_text("\n".join(world[:captions]) + "\n")
    workers = [worker(folder / name, source, store, api_url) for name in ("worker-1", "worker-2")]
    try:
        with temporary_settings(updates={PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
            deadline = time.monotonic() + 300
            while True:  # both workers have registered the deployment
                logs = [(folder / name / "serve.log").read_text() for name in ("worker-1", "worker-2")]
                if all("serving" in log for log in logs):
                    break
                assert all(w.poll() is None for w in workers) and time.monotonic() < deadline, logs
                time.sleep(1)
            started, since = time.monotonic(), datetime.now(UTC)
            ids = {run_deployment(DEPLOYMENT, timeout=0).id for _ in range(runs)}
            while True:
                flow_runs = [client.read_flow_run(i) for i in ids]
                if all(r.state_type.value in TERMINAL for r in flow_runs):
                    break
                assert all(w.poll() is None for w in workers), "a worker exited"
                time.sleep(2)
            wall = time.monotonic() - started
            computed = unit_tasks_computed(client, since)
    finally:
        for w in workers:
            services.stop(w)
    results = sum(path.is_file() for path in store.iterdir())  # one per key computed: its persisted result
    rendered = renders(store)
    logs = [(folder / name / "serve.log").read_text() for name in ("worker-1", "worker-2")]
    return Outcome(Counter(r.state_type.value for r in flow_runs),
                   tuple(sum(began(log, i) for i in ids) for log in logs),
                   sum(rendered.values()), sum(n > 1 for n in rendered.values()),
                   computed, computed - results, wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--captions", type=int, default=4)
    args = parser.parse_args()
    print("| database | completed | failed | runs per worker | samples rendered | rendered twice "
          "| unit tasks computed | computed twice | wall s |\n|---|---:|---:|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="cfgen-two-workers-") as tmp:
        folder = Path(tmp)
        folder.chmod(0o755)  # PostgreSQL runs as `postgres` under root: it must pass through
        with services.database(folder / "cluster", services.free_port()) as url, \
                services.prefect_server(url, folder / "pg-home", services.free_port()) as api:
            print(run(folder / "postgresql", api, args.runs, args.captions).row("PostgreSQL 15"), flush=True)
        sqlite = f"sqlite+aiosqlite:///{folder / 'prefect.db'}"
        with services.prefect_server(sqlite, folder / "sqlite-home", services.free_port()) as api:
            print(run(folder / "sqlite", api, args.runs, args.captions).row("SQLite"), flush=True)


if __name__ == "__main__":
    main()
