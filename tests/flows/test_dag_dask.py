"""`engine.dask_address` really puts the work on the Dask cluster, for the real `cfgen` commands.

A fresh result store makes every shard computed and the outputs equal a local run with or without Dask, so these
tests ask the scheduler where the work ran: a scheduler plugin (`PrefectTaskRuns`) records which Prefect task run
each submitted Dask key carries, the scheduler's task stream records on which worker each key finished, and the
Prefect API says whether that run computed or was a cache hit. Were the address ignored (a local task runner),
the scheduler would see none of these runs and every coverage assertion fails.

The cluster is a real `dask scheduler` and two `dask worker` processes, each started in a directory of its own with
nothing of the project's in its environment, as on other hosts: what a task needs travels with it.

- `cfgen run` (the whole-DAG flow) on that cluster, SIGKILLed once generate has persisted some samples,
  then rerun: every shard of every sharded stage computed exactly once, on a worker; generate's and selection's
  tasks on workers; none of their task runs outside the scheduler; outputs byte for byte an in-process local run's
  made with other threads (2 vs 1), shard size (16 vs 4) and batch sizes (issue 65: determinism as a property);
  and no worker holds a model afterwards (each stage released its models when its flow run ended).
- `cfgen sites` (a DVC step command) on the same cluster with its own fresh store: every shard computed on a worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

import polars as pl
import pytest
from distributed.diagnostics.plugin import SchedulerPlugin

from flows.engine.counters import facts, run_log
from tests.conftest import ROOT, WORLD_CAPTIONS, once_per_run, project_params, requires_nltk
from tests.flows.records import persisted, persisted_samples

pytestmark = [requires_nltk, pytest.mark.slow]
CFGEN = Path(sys.executable).parent / "cfgen"
ENGINE = ("engine.torch_threads=1", "engine.shard_size=4")
# The local run differs in everything that must not move a byte: threads, shard size and every batch knob.
LOCAL = ("engine.torch_threads=2", "engine.shard_size=16", "candidates.batch_size=5", "similarity.batch_size=3",
         "perplexity.batch_tokens=50", "generate.clip_batch_size=3", "judge.batch_size=1",
         "evaluate.batch_size=7")
SHARDED = ("sites", "candidates", "relations", "similarity", "perplexity")
ON_DASK = ("caption-stage", "generate", "selection")  # the flows `flows.pipeline.run_dag` gives the Dask runner
# -- what the scheduler saw ---------------------------------------------------------------------------------------

class PrefectTaskRuns(SchedulerPlugin):
    """On the scheduler: Dask key -> (Prefect task name, task run id) of every task a Prefect client submits, read
    from the task's spec as it arrives (prefect-dask's keys, `<function>-<token>`, name neither)."""

    name = "prefect-task-runs"

    def __init__(self) -> None:
        self.runs: dict[str, tuple[str, str]] = {}

    def update_graph(self, scheduler, *, tasks, **kwargs) -> None:
        for key in tasks:
            spec = getattr(getattr(scheduler.tasks.get(key), "run_spec", None), "kwargs", None) or {}
            if "task_run_id" in spec and hasattr(spec.get("task"), "name"):
                self.runs[key] = (spec["task"].name, str(spec["task_run_id"]))


def take_runs(dask_scheduler) -> dict[str, tuple[str, str]]:
    """The plugin's record so far, emptied."""
    runs = dask_scheduler.plugins[PrefectTaskRuns.name].runs
    taken = dict(runs)
    runs.clear()
    return taken


@dataclass(frozen=True)
class Cluster:
    address: str
    client: object  # distributed.Client
    worker_pids: dict[str, int]  # worker address -> its process id
    folder: Path  # a project folder, none of the processes' working directory
    scheduler_pid: int


@dataclass(frozen=True)
class OnCluster:
    """A Prefect task run the scheduler saw submitted and, unless `worker` is None, finish on that worker."""

    task: str
    run_id: str
    worker: str | None


@dataclass
class Recorded:
    stream: list[dict] = field(default_factory=list)  # the scheduler's task stream: key, worker, status, ...
    runs: dict[str, tuple[str, str]] = field(default_factory=dict)  # Dask key -> (Prefect task, run id)

    def __add__(self, other: Recorded) -> Recorded:
        return Recorded(self.stream + other.stream, {**self.runs, **other.runs})

    def task_runs(self) -> list[OnCluster]:
        finished = {entry["key"]: entry["worker"] for entry in self.stream if entry.get("status") == "OK"}
        return [OnCluster(name, run_id, finished.get(key)) for key, (name, run_id) in self.runs.items()]


@contextlib.contextmanager
def recording(cluster: Cluster) -> Iterator[Recorded]:
    """What the scheduler records during the block: its task stream and the Prefect task runs submitted."""
    from distributed import get_task_stream

    recorded = Recorded()
    cluster.client.run_on_scheduler(take_runs)  # forget earlier blocks' submissions
    with get_task_stream(client=cluster.client) as stream:
        yield recorded
    recorded.stream.extend(stream.data)
    recorded.runs.update(cluster.client.run_on_scheduler(take_runs))


DASK = Path(sys.executable).parent / "dask"


def started(command: list[str], cwd: Path, env: dict) -> subprocess.Popen:
    cwd.mkdir(parents=True, exist_ok=True)
    with (cwd / "log").open("w") as log:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def dask_cluster(root: Path, workers: dict[str, dict[str, str]] | None = None) -> Iterator[Cluster]:
    """A real `dask scheduler` and `dask worker` processes on loopback (default: two), each started in its own
    directory under `root` (as on its own host: no project there, no project path or Prefect setting in its
    environment; `workers`: name -> extra environment), one thread and `--resources GPU=1` each, without a nanny (a
    killed worker stays dead). `Cluster.folder` is a project folder of none of them."""
    from distributed import Client

    bare = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PYTHONPATH"))}
    scheduler_file = root / "scheduler.json"
    processes = [started([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address",
                          ":0", "--scheduler-file", str(scheduler_file)], root / "scheduler",
                         {**bare, "PYTHONPATH": str(ROOT)})]  # the test's scheduler plugin is imported there
    try:
        workers = workers or {"worker-a": {}, "worker-b": {}}
        for worker, extra in workers.items():
            processes.append(started([str(DASK), "worker", "--scheduler-file", str(scheduler_file), "--host",
                                      "127.0.0.1", "--nthreads", "1", "--no-nanny", "--resources", "GPU=1",
                                      "--dashboard-address", ":0"], root / worker, {**bare, **extra}))
        deadline = time.monotonic() + 120
        while not scheduler_file.is_file():
            assert time.monotonic() < deadline and processes[0].poll() is None, (root / "scheduler/log").read_text()
            time.sleep(0.2)
        with Client(scheduler_file=str(scheduler_file), set_as_default=False) as client:
            client.wait_for_workers(len(workers), timeout=120)
            client.register_plugin(PrefectTaskRuns())
            pids = client.run(os.getpid)
            assert sorted(pids.values()) == sorted(p.pid for p in processes[1:])
            assert sorted(client.run(os.getcwd).values()) == sorted(str(root / w) for w in workers)
            folder = root / "project"
            folder.mkdir()
            yield Cluster(client.scheduler.address, client, pids, folder, processes[0].pid)
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def prefect_task_runs(run_ids) -> dict[str, object]:
    """Prefect's record of these task runs, by id."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterId
    from prefect.client.schemas.sorting import TaskRunSort

    ids = [UUID(i) for i in run_ids]
    with get_client(sync_client=True) as client:
        return {str(r.id): r for start in range(0, len(ids), 100) for r in client.read_task_runs(
            task_run_filter=TaskRunFilter(id=TaskRunFilterId(any_=ids[start:start + 100])), sort=TaskRunSort.ID_DESC,
            limit=100)}


def task_runs_meant_for_dask(flow_run_ids) -> list:
    """Every task run of these flow runs and, where they are subflows, of every flow run beside them whose tasks
    `engine.dask_address` sends to the cluster (caption stages, generate, selection), wherever they ran."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterParentFlowRunId,
        TaskRunFilter,
        TaskRunFilterFlowRunId,
        TaskRunFilterSubFlowRuns,
    )
    from prefect.client.schemas.sorting import FlowRunSort, TaskRunSort

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=list(flow_run_ids))),
                                     sort=FlowRunSort.ID_DESC, limit=200)
        parents = {client.read_task_run(r.parent_task_run_id).flow_run_id for r in runs if r.parent_task_run_id}
        beside = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=list(ON_DASK))),
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=list(parents))),
            sort=FlowRunSort.ID_DESC, limit=200) if parents else []
        tasks = client.read_task_runs(task_run_filter=TaskRunFilter(
            flow_run_id=TaskRunFilterFlowRunId(any_=list({r.id for r in [*runs, *beside]})),
            subflow_runs=TaskRunFilterSubFlowRuns(exists_=False)), sort=TaskRunSort.ID_DESC, limit=200)
    assert len(runs) < 200 and len(beside) < 200 and len(tasks) < 200  # nothing left beyond a page
    return tasks


def assert_ran_on_workers(cluster: Cluster, recorded: Recorded, *cfgen_pids: int) -> Counter:
    """Every task the scheduler saw finish ran on one of the cluster's worker processes (not this one, not `cfgen`);
    every task run of the flows meant for the cluster went through its scheduler (none ran in the `cfgen` process).
    Returns the Prefect tasks computed on workers (cache hits not counted), by task name."""
    workers = {entry["worker"] for entry in recorded.stream}
    assert workers, "the scheduler's task stream saw no task finish: nothing ran on the Dask cluster"
    assert workers <= set(cluster.worker_pids), f"tasks finished on {workers}, not the workers {cluster.worker_pids}"
    assert not {cluster.worker_pids[w] for w in workers} & {os.getpid(), *cfgen_pids}
    seen = recorded.task_runs()
    prefect = prefect_task_runs({run.run_id for run in seen})
    submitted = {run.run_id for run in seen}
    flow_runs = {r.flow_run_id for r in prefect.values()}
    elsewhere = [f"{r.name} ({r.state_name})" for r in task_runs_meant_for_dask(flow_runs)
                 if str(r.id) not in submitted]
    assert not elsewhere, f"task runs that never went through the Dask scheduler: {elsewhere}"
    return Counter(run.task for run in seen if run.worker and prefect[run.run_id].state_name == "Completed")


# -- runs -----------------------------------------------------------------------------------------------------------

def folder_with_captions(folder: Path) -> Path:
    (folder / "data/raw").mkdir(parents=True, exist_ok=True)
    first = WORLD_CAPTIONS.read_text().splitlines()[:8]
    (folder / WORLD_CAPTIONS.relative_to(ROOT)).write_text("\n".join(first) + "\n")
    shutil.copy(ROOT / "params.yaml", folder / "params.yaml")
    return folder


def run_locally(folder: Path) -> dict:
    """The whole DAG on 8 demo captions in this process, on the local task runner, with other threads, shard size and
    batch sizes than the cluster's runs, its result store in `folder`: its metrics."""
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

    from flows.pipeline import run_dag

    folder_with_captions(folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        with temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: folder / "store"}):
            return run_dag(project_params(*LOCAL))


@pytest.fixture(scope="session")
def local(tmp_path_factory, prefect_server) -> tuple[Path, dict]:
    """(folder, metrics) of `run_locally`, once per test run (tests copy what they change)."""
    return once_per_run(tmp_path_factory, "local-dag", run_locally)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, prefect_server) -> Iterator[Cluster]:
    """The module's cluster, its workers started in the whole-DAG test's run folder."""
    yield from dask_cluster(tmp_path_factory.mktemp("dask"))


def cfgen(folder: Path, *args: str, log: str, code: Path | None = None) -> subprocess.Popen:
    """The real `cfgen` in `folder`, in its own session (a SIGKILL of its group reaches it alone), on the test's
    Prefect server with `folder/store` as its result store (`code`: a copy of the project's packages to run)."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(),
           "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(folder / "store"), **({"PYTHONPATH": str(code)} if code else {})}
    with (folder / log).open("w") as out:
        return subprocess.Popen([str(CFGEN), *args], cwd=folder, env=env, start_new_session=True,
                                stdout=out, stderr=subprocess.STDOUT)


def finish(process: subprocess.Popen, log: Path, timeout: float = 900) -> None:
    assert process.wait(timeout=timeout) == 0, log.read_text()[-4000:]


def on_cluster_options(cluster: Cluster) -> tuple[str, ...]:
    return tuple(arg for option in (f"engine.dask_address={cluster.address}", *ENGINE) for arg in ("-p", option))


def persisted_by(store: Path) -> Counter:
    """Samples persisted per rendering process id (`by` of each line)."""
    return Counter(int(entry["by"].rsplit(":", 1)[1]) for entry in persisted(store))


def kill_once_persisted(run: subprocess.Popen, log: Path, store: Path, total: int, kill,
                        timeout: float = 900) -> tuple[int, int]:
    """Call `kill(id of a process that persisted a sample)` as soon as 0 < persisted samples < total, while `run`
    runs; returns (that process id, the samples persisted then)."""
    deadline = time.monotonic() + timeout
    while True:
        assert run.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
        by = persisted_by(store)
        if 0 < (done := sum(by.values())) < total:
            kill(pid := next(iter(by)))
            return pid, done
        time.sleep(0.01)


def same_bytes(a: Path, b: Path, under: str, pattern: str) -> list[str]:
    """The files matching `pattern` under `under`: the same names in run folders `a` and `b`, the same bytes."""
    names = [sorted(str(p.relative_to(folder)) for p in (folder / under).rglob(pattern)) for folder in (a, b)]
    assert names[0] == names[1], names
    differ = [n for n in names[0] if (a / n).read_bytes() != (b / n).read_bytes()]
    assert not differ, f"differ from the local run: {differ}"
    return names[0]


# -- tests ----------------------------------------------------------------------------------------------------------

def test_cfgen_run_on_a_dask_cluster_survives_sigkill_and_equals_a_local_run(local, cluster):
    from tasks.core.loading import release_models
    from tasks.image.chunks import sample_cut

    local_folder, local_metrics = local
    folder = folder_with_captions(cluster.folder)
    params = project_params()
    paths, total = params.paths, local_metrics["generate"]["samples"]
    command = ("run", *on_cluster_options(cluster))

    with recording(cluster) as first:
        killed = cfgen(folder, *command, log="killed.log")
        _, at_kill = kill_once_persisted(killed, folder / "killed.log", folder / "store", total,
                                         lambda _: os.killpg(killed.pid, signal.SIGKILL))
        killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    assert not (folder / paths.samples).exists(), "generate had written its output before the kill"
    with recording(cluster) as second:
        rerun = cfgen(folder, *command, log="rerun.log")
        finish(rerun, folder / "rerun.log")

    computed = assert_ran_on_workers(cluster, first + second, killed.pid, rerun.pid)
    metrics = {p.name.removesuffix(".run.json"): json.loads(p.read_text())
               for p in (folder / paths.metrics).glob("*.run.json")}
    for stage in SHARDED:  # every shard once, on a worker: the rerun took them all from the killed run's results
        assert computed[stage] == metrics[stage]["shards"] > 0, (stage, computed)
    assert [metrics[stage]["shards_computed"] for stage in SHARDED] == [0] * len(SHARDED)
    pairs = pl.read_parquet(local_folder / paths.counterfactual_captions).height
    cut = sample_cut([params.generate.n_samples] * pairs, params.generate.pairs_per_task)
    rerun_tasks = Counter(run.task for run in second.task_runs() if run.worker)
    assert rerun_tasks["generate_pairs"] == len(cut) > 0, rerun_tasks
    assert rerun_tasks["ask_pair"] > 0, rerun_tasks  # the judge's VLM, the last model a worker loaded
    assert set(cluster.client.run(release_models).values()) == {0}  # nothing left to release
    assert rerun_tasks["render_canonicals"] > 0, rerun_tasks
    assert persisted_samples(folder / "store") == total  # each sample rendered once: the rerun renders what's missing
    assert metrics["generate"]["samples_rendered"] <= total - at_kill

    same_bytes(local_folder, folder, "data", "*.parquet")
    assert same_bytes(local_folder, folder, str(paths.selected_images), "*.png")
    reports = sorted(p.relative_to(local_folder) for p in (local_folder / "reports").rglob("*.json"))
    differ = [str(n) for n in reports if facts(json.loads((local_folder / n).read_text()))
              != facts(json.loads((folder / n).read_text()))]
    assert reports and not differ, f"metrics that differ from the local run's: {differ}"


def test_a_step_command_maps_its_shards_over_the_cluster(tmp_path, local, cluster):
    """`cfgen sites` with the address and a fresh store of its own: every shard computed on a worker, output =
    the local run's."""
    local_folder, _ = local
    folder = folder_with_captions(tmp_path)
    paths = project_params().paths
    (folder / paths.captions).parent.mkdir(parents=True)
    shutil.copy(local_folder / paths.captions, folder / paths.captions)
    with recording(cluster) as recorded:
        step = cfgen(folder, "sites", str(paths.captions), str(paths.sites), "--metrics", "sites.json",
                     *on_cluster_options(cluster), log="sites.log")
        finish(step, folder / "sites.log")
    computed = assert_ran_on_workers(cluster, recorded, step.pid)
    shards = computed["sites"]
    assert set(computed) == {"sites"} and shards > 0, computed
    metrics = json.loads(run_log(folder / "sites.json").read_text())
    assert metrics["shards"] == metrics["shards_computed"] == shards, metrics
    assert same_bytes(local_folder, folder, str(paths.sites.parent), "sites.*parquet") == [
        str(paths.sites), str(paths.sites.with_suffix(".rejects.parquet"))]


def test_a_worker_started_before_a_code_change_refuses_its_tasks(tmp_path, prefect_server):
    """A real `dask worker` and `cfgen sites` running one copy of the project; the copy's sites code changes (a `git
    pull` the worker was not restarted for): the worker refuses the new keys' shards in one line, renders nothing."""
    code = tmp_path / "code"
    for package in ("tasks", "flows"):
        shutil.copytree(ROOT / package, code / package, ignore=shutil.ignore_patterns("__pycache__"))
    clusters = dask_cluster(tmp_path / "cluster", {"worker-old": {"PYTHONPATH": str(code)}})
    cluster = next(clusters)
    try:
        folder, paths = folder_with_captions(cluster.folder), project_params().paths
        finish(cfgen(folder, "ingest", str(paths.captions_source), str(paths.captions), log="ingest.log", code=code),
               folder / "ingest.log")
        command = ("sites", str(paths.captions), str(paths.sites), "--metrics", "sites.json",
                   *on_cluster_options(cluster))
        finish(cfgen(folder, *command, log="before.log", code=code), folder / "before.log")
        assert json.loads(run_log(folder / "sites.json").read_text())["shards_computed"] > 0
        sites = code / "tasks/text/sites.py"
        sites.write_text(sites.read_text().replace("        sites.extend(found)\n",
                                                   "        sites.extend(found[:])\n"))
        after = cfgen(folder, *command, log="after.log", code=code)
        assert after.wait(timeout=300) == 2, (folder / "after.log").read_text()[-4000:]
        lines = (folder / "after.log").read_text().strip().splitlines()
        assert lines[-1] == "error: restart the workers: they run other code than this checkout (sites)", lines[-5:]
        assert sum("Traceback" in line for line in lines) == 0
    finally:
        clusters.close()


@pytest.fixture
def spare_cluster(tmp_path, prefect_server) -> Iterator[Cluster]:
    """A cluster of its own, for a test that kills one of its workers."""
    yield from dask_cluster(tmp_path / "cluster")


def test_a_killed_worker_costs_its_batch_in_flight_and_a_lost_scheduler_one_line(local, spare_cluster):
    """`cfgen generate` on the cluster with a relative `engine.result_storage` (resolved in the project, not in the
    workers' directories). A worker SIGKILLed once it has persisted a sample: the run completes on the other, every
    sample is persisted exactly once, the output equals the local run's, and a rerun on the cluster renders nothing.
    Then, into another store, the scheduler SIGKILLed mid-generate: one line says so, and a local rerun renders only
    the samples not persisted by then."""
    local_folder, local_metrics = local
    cluster, paths = spare_cluster, project_params().paths
    folder = folder_with_captions(cluster.folder)
    for path in (paths.counterfactual_captions, paths.models):
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (local_folder / path).is_dir() else shutil.copy
        copy(local_folder / path, folder / path)
    total = local_metrics["generate"]["samples"]
    command = ("generate", str(paths.counterfactual_captions), str(paths.samples), "--metrics", "generate.json",
               *(arg for option in ("generate.pairs_per_task=2", *ENGINE) for arg in ("-p", option)))
    on_cluster = ("-p", f"engine.dask_address={cluster.address}")

    store = ("-p", "engine.result_storage=shared-store")
    run = cfgen(folder, *command, *store, *on_cluster, log="worker-killed.log")
    killed, _ = kill_once_persisted(run, folder / "worker-killed.log", folder / "shared-store", total,
                                    lambda pid: os.kill(pid, signal.SIGKILL))
    finish(run, folder / "worker-killed.log")
    by = persisted_by(folder / "shared-store")
    print(f"samples persisted per worker pid: {dict(by)} (killed: {killed}); of {total}")
    assert persisted_samples(folder / "shared-store") == total == sum(by.values())  # each persisted exactly once
    assert set(by) <= set(cluster.worker_pids.values()) and by[killed] > 0 and len(by) == 2
    same_bytes(local_folder, folder, str(paths.samples.parent), "samples*.parquet")
    rerun = cfgen(folder, *command, *store, *on_cluster, log="rerun.log")
    finish(rerun, folder / "rerun.log")
    assert json.loads(run_log(folder / "generate.json").read_text())["samples_rendered"] == 0

    store = ("-p", "engine.result_storage=second-store")
    run = cfgen(folder, *command, *store, *on_cluster, log="scheduler-killed.log")
    survivor, _ = kill_once_persisted(run, folder / "scheduler-killed.log", folder / "second-store", total,
                                      lambda pid: os.kill(cluster.scheduler_pid, signal.SIGKILL))
    assert run.wait(timeout=300) == 2
    last = (folder / "scheduler-killed.log").read_text().strip().splitlines()[-1]
    assert last.startswith(f"error: lost the Dask scheduler at {cluster.address} mid-run"), last
    os.kill(survivor, signal.SIGKILL)  # a worker without its scheduler, still rendering into the store
    persisted = persisted_samples(folder / "second-store")
    rerun = cfgen(folder, *command, *store, log="resumed.log")
    finish(rerun, folder / "resumed.log")
    resumed = json.loads(run_log(folder / "generate.json").read_text())
    print(f"scheduler lost with {persisted} of {total} samples persisted; the local rerun rendered "
          f"{resumed['samples_rendered']}")
    assert 0 < persisted < total and resumed["samples_rendered"] == total - persisted
    same_bytes(local_folder, folder, str(paths.samples.parent), "samples*.parquet")


def test_the_paper_profile_refuses_workers_without_exactly_one_gpu(tmp_path, prefect_server):
    """Through `flows.engine.sharding.task_runner`, as every command builds it: a worker that sees no GPU and one that
    sees two (CUDA_VISIBLE_DEVICES) are refused in one line naming each; the worker pinned to one GPU is not named."""
    from prefect import task

    from flows.engine.sharding import task_runner
    from tasks.core.errors import UserError

    workers = {"no-gpu": {"CUDA_VISIBLE_DEVICES": ""}, "two-gpus": {"CUDA_VISIBLE_DEVICES": "0,1"},
               "one-gpu": {"CUDA_VISIBLE_DEVICES": "1"}}
    cluster_runs = dask_cluster(tmp_path, workers)
    cluster = next(cluster_runs)
    try:
        by_dir = {Path(cwd).name: address for address, cwd in cluster.client.run(os.getcwd).items()}
        runner = task_runner(project_params("profile=paper", f"engine.dask_address={cluster.address}"))
        with pytest.raises(UserError) as refused, runner:
            runner.submit(task(lambda: os.getpid()), {})
        line = str(refused.value)
        assert "\n" not in line and by_dir["one-gpu"] not in line
        assert f"Dask worker {by_dir['no-gpu']} sees no GPU" in line
        assert f"Dask worker {by_dir['two-gpus']} sees 2 GPUs (0,1) and some model has device: auto" in line
    finally:
        cluster_runs.close()
