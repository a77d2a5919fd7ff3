"""The whole DAG as one Prefect flow, the same stage code the DVC stages run, and its scheduled deployment.

`dataset_flow` reads every path from `params.yaml` (`paths`), so it writes exactly what `dvc repro` writes; the
shard/pair caches are shared, so a scheduled refresh after new captions arrive computes only what is new.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task

from flows.captions import STAGES, ingest_task, stage_flow
from flows.images import filter_flow, generate_flow
from flows.io import write_json
from flows.publish import datasheet_flow, export_flow, report_flow
from tasks.params import PARAMS_FILE, TinyModelsParams, load_section, read_params

CAPTION_OUTPUTS = {"nouns": "nouns", "candidates": "candidates", "similarity": "similarity",
                   "perplexity": "counterfactual_captions"}


@task(retries=2, retry_delay_seconds=5)
def tiny_models_task(source: Path, output: Path, raw: dict[str, Any]) -> None:
    """The demo profile's tiny random models, built from the caption file's vocabulary (offline, seeded)."""
    from tasks import ingest, tiny_images, tiny_text

    params = load_section(TinyModelsParams, "tiny_models", raw)
    captions, _ = ingest.read_captions(source)
    tiny_text.build(captions["caption"].to_list(), output, params)
    tiny_images.build_tiny_diffusion(output / "diffusion", params.seed)
    tiny_images.build_tiny_clip(output / "clip", params.seed)


def run_dag(raw: dict[str, Any]) -> dict[str, dict]:
    """Every stage in DAG order; returns their metrics (also written to `paths.metrics/<stage>.json`)."""
    paths = {k: Path(v) for k, v in raw["paths"].items()}
    if raw.get("profile", "demo") == "demo":
        tiny_models_task(paths["captions_source"], paths["tiny_models"], raw)
    metrics = {"ingest": ingest_task.with_options(retries=2)(paths["captions_source"], paths["captions"])}
    previous = paths["captions"]
    for stage in STAGES:
        target = paths[CAPTION_OUTPUTS[stage]]
        metrics[stage] = stage_flow(stage, previous, target, raw)
        previous = target
    metrics["generate"] = generate_flow(previous, paths["samples"], paths["images"], raw)
    metrics["filter"] = filter_flow(paths["samples"], paths["selected"], paths["images"], paths["selected_images"],
                                    raw)
    for stage, m in metrics.items():
        write_json(m, paths["metrics"] / f"{stage}.json")
    report_flow(raw)
    export_flow(raw)
    datasheet_flow(raw)
    return metrics


@flow(name="cfgen-dataset")
def dataset_flow(source: str | None = None, profile: str | None = None, params_file: str = str(PARAMS_FILE)) -> dict:
    """Refresh the dataset: all stages on `source` (default `paths.captions_source`) under `profile`."""
    overrides = {k: v for k, v in {"paths.captions_source": source, "profile": profile}.items() if v is not None}
    raw = read_params(Path(params_file), overrides)
    metrics = run_dag(raw)
    get_run_logger().info("dataset refreshed: %s pairs accepted", metrics["filter"]["accepted"])
    return {stage: {k: v for k, v in m.items() if k != "rejects"} for stage, m in metrics.items()}


def serve(name: str, cron: str, source: str | None, profile: str | None, params_file: str) -> None:
    """Register the scheduled deployment with the Prefect API in PREFECT_API_URL and run its flow runs here."""
    dataset_flow.serve(name=name, cron=cron,
                       parameters={"source": source, "profile": profile, "params_file": params_file})
