"""The report flow: reports/metrics.json (funnel, rates, score means, UNet evaluations per accepted pair), figures
and plot data."""

from __future__ import annotations

import json

from prefect import flow, get_run_logger

from flows.engine.console import show_json
from tasks.core.io import read_frame
from tasks.release import report
from tasks.stages import Params, step, steps

FRAMES = {"captions": "ingest", "sites": "sites", "candidates": "candidates", "similar": "similarity",
          "counterfactuals": "perplexity", "samples": "generate", "selected": "selection"}  # the stage writing each


@flow(name="report")
def report_flow(params: Params) -> dict:
    """reports/metrics.json (funnel, rates, score means, UNet evaluations per accepted pair) + figures + plot data."""
    paths = params.paths
    made = {name: step(by) for name, by in FRAMES.items()}
    frames = {name: read_frame(getattr(paths, s.data), s.output, s.name) for name, s in made.items()}
    stage_metrics = {s: json.loads((paths.metrics / f"{s}.json").read_text()) for s in steps()}
    truth = paths.metrics / "truth.json"
    metrics = report.write_report(frames, stage_metrics, params,
                                  json.loads(truth.read_text()) if truth.is_file() else None)
    get_run_logger().info("report: %s", metrics["funnel"])
    return metrics


def show(metrics: dict) -> None:
    show_json(metrics["funnel"])
