"""The report flow: reports/metrics.json (funnel, rates, score means, UNet evaluations per accepted pair), figures
and plot data."""

from __future__ import annotations

import json

import polars as pl
from prefect import flow, get_run_logger

from flows.engine.console import show_json
from tasks.release import report
from tasks.stages import Params, steps

FRAMES = {"captions": "captions", "sites": "sites", "candidates": "candidates", "similar": "similarity",
          "counterfactuals": "counterfactual_captions", "samples": "samples", "selected": "selected"}


@flow(name="report")
def report_flow(params: Params) -> dict:
    """reports/metrics.json (funnel, rates, score means, UNet evaluations per accepted pair) + figures + plot data."""
    paths = params.paths
    frames = {name: pl.read_parquet(getattr(paths, key)) for name, key in FRAMES.items()}
    stage_metrics = {s: json.loads((paths.metrics / f"{s}.json").read_text()) for s in steps()}
    truth = paths.metrics / "truth.json"
    metrics = report.write_report(frames, stage_metrics, params,
                                  json.loads(truth.read_text()) if truth.is_file() else None)
    get_run_logger().info("report: %s", metrics["funnel"])
    return metrics


def show(metrics: dict) -> None:
    show_json(metrics["funnel"])
