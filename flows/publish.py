"""Publishing flows: run report (metrics.json, figures, plot data), HF datasets export, datasheet + dataset card.

All three read their inputs from `params.yaml` `paths`, like `dataset_flow`, so DVC and Prefect write the same files.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import polars as pl
from prefect import flow, get_run_logger

from flows.io import write_json
from tasks import datasheet, export, report
from tasks import filter as clip_filter
from tasks.models import fingerprint
from tasks.params import (CandidatesParams, DatasheetParams, ExportParams, FilterParams, GenerateParams,
                          PerplexityParams, SimilarityParams, load_section)

STAGE_METRICS = ("ingest", "nouns", "candidates", "similarity", "perplexity", "generate", "filter")


def _paths(raw: dict[str, Any]) -> dict[str, Path]:
    return {k: Path(v) for k, v in raw["paths"].items()}


def read_stage_metrics(paths: dict[str, Path]) -> dict[str, dict]:
    return {s: json.loads((paths["metrics"] / f"{s}.json").read_text()) for s in STAGE_METRICS}


def model_ids(raw: dict[str, Any]) -> dict[str, str]:
    """`model_<role>` -> identity (hub id@revision, or a local folder's content hash) of every model used."""
    generate = load_section(GenerateParams, "generate", raw)
    specs = {
        "mlm": load_section(CandidatesParams, "candidates", raw).model,
        "sentence_encoder": load_section(SimilarityParams, "similarity", raw).model,
        "causal_lm": load_section(PerplexityParams, "perplexity", raw).model,
        "diffusion": generate.diffusion,
        "vae": generate.vae,
    }
    ids = {f"model_{role}": fingerprint(spec) for role, spec in specs.items() if spec is not None}
    ids["model_clip"] = f"{generate.clip.id}:{Path(generate.clip.pretrained).name}"
    return ids


def _frames(paths: dict[str, Path]) -> dict[str, pl.DataFrame]:
    names = {"captions": "captions", "nouns": "nouns", "candidates": "candidates",
             "counterfactuals": "counterfactual_captions", "samples": "samples", "selected": "selected"}
    return {name: pl.read_parquet(paths[key]) for name, key in names.items()}


@flow(name="report")
def report_flow(raw: dict[str, Any]) -> dict:
    """reports/metrics.json (funnel, rates, score means, UNet evaluations per accepted pair) + figures + plot data."""
    paths = _paths(raw)
    frames = _frames(paths)
    funnel = report.funnel(frames["captions"], frames["nouns"], frames["candidates"], frames["counterfactuals"],
                           frames["selected"])
    metrics = report.run_metrics(funnel, read_stage_metrics(paths), frames["counterfactuals"], frames["samples"],
                                 frames["selected"])
    write_json(metrics, paths["run_metrics"])
    window = load_section(SimilarityParams, "similarity", raw)
    report.figures(frames["counterfactuals"], frames["samples"], frames["selected"], funnel,
                   paths["selected_images"], paths["figures"],
                   thresholds=clip_filter.thresholds(load_section(FilterParams, "filter", raw)),
                   window=(window.lower, window.upper))
    report.write_plot_data(frames["counterfactuals"], frames["selected"], paths["plots"], funnel=funnel)
    get_run_logger().info("report: %s", funnel)
    return metrics


@flow(name="export")
def export_flow(raw: dict[str, Any]) -> int:
    """The selected pairs as a `datasets` folder of parquet shards (images embedded); returns the row count."""
    paths, params = _paths(raw), load_section(ExportParams, "export", raw)
    rows = export.dataset_rows(pl.read_parquet(paths["selected"]), pl.read_parquet(paths["counterfactual_captions"]),
                               model_ids(raw))
    export.write_dataset(rows, paths["selected_images"], paths["export"], params)
    return rows.height


@flow(name="datasheet")
def datasheet_flow(raw: dict[str, Any]) -> None:
    """The datasheet (reports/) and the dataset card that embeds it (export folder README.md).

    Counts come from the report's `metrics.json` (funnel, per-stage metrics); `final` is what the export holds.
    """
    paths = _paths(raw)
    dp, ep = load_section(DatasheetParams, "datasheet", raw), load_section(ExportParams, "export", raw)
    exported = pl.scan_parquet(paths["export"] / "data" / "*.parquet").select("id").collect()["id"].to_list()
    run = json.loads(paths["run_metrics"].read_text())
    funnel = {step: run["funnel"][step] for step in report.FUNNEL_STEPS} | {"final": len(exported)}
    if funnel["final"] > funnel["with_accepted_pair"]:
        raise ValueError(f"export holds {funnel['final']} pairs but only {funnel['with_accepted_pair']} were accepted")
    table = datasheet.altered_subjects(pl.read_parquet(paths["counterfactual_captions"]), exported)
    stages = {stage: run["stages"][stage] for stage in STAGE_METRICS}  # DAG order (the JSON is key-sorted)
    sheet = datasheet.render_datasheet(funnel, stages, raw, model_ids(raw), table,
                                       datasheet.human_share(table, dp.human_words), date.today().isoformat(), dp)
    paths["datasheet"].parent.mkdir(parents=True, exist_ok=True)
    paths["datasheet"].write_text(sheet)
    (paths["export"] / "README.md").write_text(datasheet.dataset_card(sheet, len(exported), ep))
