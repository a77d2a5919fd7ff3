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
from flows.evaluation import evaluate_flow
from flows.image.generate import generate_flow
from flows.image.selection import selection_flow
from flows.judge import judge_flow
from flows.release.datasheet import datasheet_flow
from flows.release.export import export_flow
from flows.release.mixtures import mixtures_flow
from flows.release.report import report_flow
from flows.removal.captions import removal_captions_flow
from flows.removal.export import removal_export_flow
from flows.removal.inpaint import inpaint_flow
from flows.removal.masks import removal_masks_flow
from flows.removal.selection import removal_selection_flow
from flows.text import ingest_task, stage_flow
from flows.truth import truth_flow
from flows.validation import validation_flow, validation_tasks_flow
from tasks.config import PARAMS_FILE, literal_overrides, load_params
from tasks.demo import synthetic_coco, tiny_models
from tasks.demo.params import TinyModelsParams
from tasks.params import Params
from tasks.stages import CAPTION_STEPS, stages


@task(retries=2, retry_delay_seconds=5)
def tiny_models_task(source: Path, output: Path, params: TinyModelsParams) -> None:
    """The demo profile's tiny random models (`tasks.demo.tiny_models.build`)."""
    tiny_models.build(source, output, params)


@task(retries=2, retry_delay_seconds=5)
def removal_inputs_task(params: Params) -> None:
    """The demo profile's object-removal input: the synthetic COCO set."""
    synthetic_coco.build(params.paths.synthetic_coco, params.synthetic_coco)


def run_dag(params: Params) -> dict[str, dict]:
    """Every stage in DAG order; returns their metrics (also written to `paths.metrics/<stage>.json`). The sharded
    stages and the judge run on `task_runner` (the cluster when one is set); evaluate and the object-removal flows
    that load models declare their own `LocalTaskRunner` (inpaint's of one thread: its pipeline is not thread-safe).
    Either way a stage's models go when its flow run ends."""
    paths, runner = params.paths, task_runner(params)
    if params.profile == "demo":
        tiny_models_task(paths.captions_source, paths.models / "demo", params.tiny_models)
    metrics = {"ingest": ingest_task.with_options(retries=2)(paths.captions_source, paths.captions)}
    previous = paths.captions
    for name in CAPTION_STEPS:
        target = getattr(paths, stages()[name].data)
        metrics[name] = stage_flow.with_options(task_runner=runner)(name, previous, target, params)
        previous = target
    metrics["generate"] = generate_flow.with_options(task_runner=runner)(previous, paths.samples, params)
    metrics["selection"] = selection_flow.with_options(task_runner=runner)(paths.samples, paths.selected,
                                                                     paths.selected_images, params)
    for name, m in metrics.items():
        write_metrics(m, paths.metrics / f"{name}.json")
    validation_tasks_flow(params)
    validation_flow(params)
    metrics["judge"] = judge_flow.with_options(task_runner=runner)(params)
    metrics["truth"] = truth_flow.with_options(task_runner=runner)(params)
    if params.profile == "demo":
        removal_inputs_task(params)
    for removal_flow in (removal_masks_flow, removal_captions_flow, inpaint_flow, removal_selection_flow):
        metrics[removal_flow.name.replace("-", "_")] = removal_flow(params)
    evaluate_flow(params)
    report_flow(params)
    export_flow(params)
    mixtures_flow(params)
    removal_export_flow(params)
    datasheet_flow(params)
    return metrics


@flow(name="cfgen-dataset")
def dataset_flow(source: str | None = None, profile: str | None = None, params_file: str = str(PARAMS_FILE),
                 overrides: list[str] | None = None) -> dict:
    """Refresh the dataset: all stages on `source` (default `paths.captions_source`) under `profile`."""
    extra = literal_overrides({"paths.captions_source": source, "profile": profile})
    metrics = run_dag(load_params(Path(params_file), [*(overrides or []), *extra]))
    get_run_logger().info("dataset refreshed: %s pairs accepted", metrics["selection"]["accepted"])
    return {stage: {k: v for k, v in m.items() if k != "rejects"} for stage, m in metrics.items()}
