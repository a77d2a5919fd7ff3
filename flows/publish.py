"""Publishing flows: run report (metrics.json, figures, plot data), HF datasets export, datasheet + dataset card.

All three read their inputs from `params.yaml` `paths`, like `dataset_flow`, so DVC and Prefect write the same files.
"""

from __future__ import annotations

import json
from datetime import date

import polars as pl
from prefect import flow, get_run_logger

from flows.io import write_json
from tasks import datasheet, export, report
from tasks import filter as clip_filter
from tasks.models import fingerprint
from tasks.params import Params, PathsParams

STAGE_METRICS = ("ingest", "nouns", "candidates", "similarity", "perplexity", "generate", "filter")


def read_stage_metrics(paths: PathsParams) -> dict[str, dict]:
    return {s: json.loads((paths.metrics / f"{s}.json").read_text()) for s in STAGE_METRICS}


def model_ids(params: Params) -> dict[str, str]:
    """`model_<role>` -> content identity (`models.fingerprint`) of every model the dataset was made with."""
    specs = {"mlm": params.candidates.model, "sentence_encoder": params.similarity.model,
             "causal_lm": params.perplexity.model, "diffusion": params.generate.diffusion, "vae": params.generate.vae,
             "clip": params.generate.clip}
    return {f"model_{role}": fingerprint(spec) for role, spec in specs.items() if spec is not None}


def _frames(paths: PathsParams) -> dict[str, pl.DataFrame]:
    names = {"captions": "captions", "nouns": "nouns", "candidates": "candidates",
             "counterfactuals": "counterfactual_captions", "samples": "samples", "selected": "selected"}
    return {name: pl.read_parquet(getattr(paths, key)) for name, key in names.items()}


@flow(name="report")
def report_flow(params: Params) -> dict:
    """reports/metrics.json (funnel, rates, score means, UNet evaluations per accepted pair) + figures + plot data."""
    paths = params.paths
    frames = _frames(paths)
    funnel = report.funnel(frames["captions"], frames["nouns"], frames["candidates"], frames["counterfactuals"],
                           frames["selected"])
    metrics = report.run_metrics(funnel, read_stage_metrics(paths), frames["counterfactuals"], frames["samples"],
                                 frames["selected"])
    write_json(metrics, paths.run_metrics)
    report.figures(frames["counterfactuals"], frames["samples"], frames["selected"], funnel, paths.selected_images,
                   paths.figures, thresholds=clip_filter.thresholds(params.filter),
                   window=(params.similarity.lower, params.similarity.upper))
    report.write_plot_data(frames["counterfactuals"], frames["selected"], paths.plots, funnel=funnel)
    get_run_logger().info("report: %s", funnel)
    return metrics


@flow(name="export")
def export_flow(params: Params) -> int:
    """The selected pairs as a `datasets` folder of parquet shards (images embedded); returns the row count."""
    paths = params.paths
    rows = export.dataset_rows(pl.read_parquet(paths.selected), pl.read_parquet(paths.counterfactual_captions),
                               model_ids(params))
    export.write_dataset(rows, paths.selected_images, paths.export, params.export)
    return rows.height


@flow(name="datasheet")
def datasheet_flow(params: Params) -> None:
    """The datasheet (reports/) and the dataset card that embeds it (export folder README.md).

    Counts come from the report's `metrics.json` (funnel, per-stage metrics); `final` is what the export holds.
    """
    paths, dp, ep = params.paths, params.datasheet, params.export
    exported = pl.scan_parquet(paths.export / "data" / "*.parquet").select("id").collect()["id"].to_list()
    run = json.loads(paths.run_metrics.read_text())
    funnel = {step: run["funnel"][step] for step in report.FUNNEL_STEPS} | {"final": len(exported)}
    if funnel["final"] > funnel["with_accepted_pair"]:
        raise ValueError(f"export holds {funnel['final']} pairs but only {funnel['with_accepted_pair']} were accepted")
    table = datasheet.altered_subjects(pl.read_parquet(paths.counterfactual_captions), exported)
    stages = {stage: run["stages"][stage] for stage in STAGE_METRICS}  # DAG order (the JSON is key-sorted)
    sheet = datasheet.render_datasheet(funnel, stages, params.model_dump(mode="json"), model_ids(params), table,
                                       datasheet.human_share(table, dp.human_words), date.today().isoformat(), dp)
    paths.datasheet.parent.mkdir(parents=True, exist_ok=True)
    paths.datasheet.write_text(sheet)
    (paths.export / "README.md").write_text(datasheet.dataset_card(sheet, len(exported), ep))
