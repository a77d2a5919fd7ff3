"""The whole DAG as one Prefect flow, the same stage code the DVC stages run, and its scheduled deployment.

`dataset_flow` reads every path from `params.yaml` (`paths`), so it writes exactly what `dvc repro` writes; the
shard/pair caches are shared, so a scheduled refresh after new captions arrive computes only what is new. Every
sharded stage runs on `engine.dask_address`'s cluster when one is set, however the DAG is started.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task

from flows.engine.counters import write_metrics
from flows.engine.sharding import task_runner
from flows.runners import run_step, run_table
from tasks.config import PARAMS_FILE, literal_overrides, load_params
from tasks.demo import synthetic_coco, tiny_models
from tasks.demo.params import TinyModelsParams
from tasks.stages import Params, Stage, stages, step


@task(retries=2, retry_delay_seconds=5)
def tiny_models_task(source: Path, output: Path, params: TinyModelsParams) -> None:
    """The demo profile's tiny random models (`tasks.demo.tiny_models.build`)."""
    tiny_models.build(source, output, params)


@task(retries=2, retry_delay_seconds=5)
def removal_inputs_task(params: Params) -> None:
    """The demo profile's object-removal input: the synthetic COCO set."""
    synthetic_coco.build(params.paths.synthetic_coco, params.synthetic_coco)


def run_dag(params: Params) -> dict[str, dict]:
    """Every stage in DAG order (`tasks.stages.stages`, a walk over the manifest) after the demo profile's inputs;
    returns their metrics (a data stage's also written to `paths.metrics/<stage>.json`, as its DVC stage writes it).
    The sharded stages run on `task_runner` (the cluster when one is set); evaluate and the object-removal flows
    that load models declare their own `LocalTaskRunner` (inpaint's of one thread: its pipeline is not thread-safe).
    Either way a stage's models go when its flow run ends."""
    paths, runner = params.paths, task_runner(params)
    if params.profile == "demo":
        tiny_models_task(paths.captions_source, paths.models / "demo", params.tiny_models)
        removal_inputs_task(params)
    metrics = {}
    for name, declared in stages().items():
        if isinstance(declared, Stage):
            source = getattr(paths, step(declared.after).data) if declared.after else paths.captions_source
            metrics[name] = run_step(declared, params, source, getattr(paths, declared.data), paths.selected_images,
                                     runner)
            write_metrics(metrics[name], paths.metrics / f"{name}.json")
        else:
            metrics[name] = run_table(declared, params, runner)
    return metrics


@flow(name="cfgen-dataset")
def dataset_flow(source: str | None = None, profile: str | None = None, params_file: str = str(PARAMS_FILE),
                 overrides: list[str] | None = None) -> dict:
    """Refresh the dataset: all stages on `source` (default `paths.captions_source`) under `profile`."""
    extra = literal_overrides({"paths.captions_source": source, "profile": profile})
    metrics = run_dag(load_params(Path(params_file), [*(overrides or []), *extra]))
    get_run_logger().info("dataset refreshed: %s pairs accepted", metrics["selection"]["accepted"])
    return {stage: {k: v for k, v in m.items() if k != "rejects"} if isinstance(m, dict) else m
            for stage, m in metrics.items()}
