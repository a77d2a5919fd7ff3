"""Release flows: run report (metrics.json, figures, plot data), HF datasets export, datasheet + dataset card.

Each reads the stage outputs from `params.yaml` `paths`, like `dataset_flow`, so DVC and Prefect write the same files.
"""

from __future__ import annotations

import json

import polars as pl
from prefect import flow, get_run_logger

from flows.commands import PathsCommand, show_json
from flows.engine.console import console
from tasks.core.io import source_image_paths, write_json, write_text
from tasks.params import Params
from tasks.release import card, datasheet, export, mixtures, report
from tasks.release.provenance import provenance
from tasks.stages import stages

FRAMES = {"captions": "captions", "sites": "sites", "candidates": "candidates", "similar": "similarity",
          "counterfactuals": "counterfactual_captions", "samples": "samples", "selected": "selected"}


@flow(name="report")
def report_flow(params: Params) -> dict:
    """reports/metrics.json (funnel, rates, score means, UNet evaluations per accepted pair) + figures + plot data."""
    paths = params.paths
    frames = {name: pl.read_parquet(getattr(paths, key)) for name, key in FRAMES.items()}
    stage_metrics = {s: json.loads((paths.metrics / f"{s}.json").read_text()) for s in stages()}
    truth = paths.metrics / "truth.json"
    metrics = report.write_report(frames, stage_metrics, params,
                                  json.loads(truth.read_text()) if truth.is_file() else None)
    get_run_logger().info("report: %s", metrics["funnel"])
    return metrics


@flow(name="export")
def export_flow(params: Params) -> int:
    """The selected pairs as a `datasets` folder of parquet shards (images embedded), the human-validated ones as a
    second config (`validated/`) and those the VLM judge passes as a third (`judged/`); returns the row count."""
    paths = params.paths
    judged = pl.read_parquet(paths.judged) if paths.judged.is_file() else None
    rows = export.dataset_rows(pl.read_parquet(paths.selected), pl.read_parquet(paths.counterfactual_captions),
                               provenance(params), judged)
    export.write_dataset({"train": rows}, paths.selected_images, paths.export, params.export)
    validated = (pl.read_parquet(paths.validated)["caption_id"] if paths.validated.is_file()
                 else pl.Series(dtype=pl.String))
    for folder, chosen in (("validated", pl.col("id").is_in(validated)), ("judged", pl.col("judge_pass"))):
        export.write_dataset({"train": rows.filter(chosen)}, paths.selected_images, paths.export, params.export,
                             folder=folder)
    return rows.height


@flow(name="mixtures")
def mixtures_flow(params: Params) -> dict:
    """The base / medium / all training mixtures as `datasets` configs under the export folder; returns their
    sizes (also written to `paths.metrics/mixtures.json`)."""
    paths = params.paths
    selected = pl.read_parquet(paths.selected)
    real = {cid: str(path.absolute()) for cid, path in zip(selected["caption_id"], source_image_paths(
        selected["image_id"], paths.source_images, paths.source_image_name)) if path}  # not under selected_images
    built = mixtures.mixture_rows(selected, real, params.mixtures.seed)
    mixtures.write_mixtures(built, paths.selected_images, paths.export / "mixtures")
    result = {"pairs": selected.height, "real_images": len(real), "sizes": mixtures.sizes(built)}
    write_json(result, paths.metrics / "mixtures.json")
    return result


@flow(name="datasheet")
def datasheet_flow(params: Params) -> None:
    """The datasheet and the dataset card, from the report's metrics and what the export holds."""
    paths = params.paths
    exported = pl.scan_parquet(paths.export / "data" / "*.parquet").select("id").collect()["id"].to_list()
    found = {name: json.loads(path.read_text()) if path.is_file() else None for name, path in (
        ("evaluation", paths.evaluation_reports / "metrics.json"), ("mixtures", paths.metrics / "mixtures.json"),
        ("validation", paths.metrics / "validation.json"), ("judge", paths.metrics / "judge.json"),
        ("truth", paths.metrics / "truth.json"))}
    sheet = datasheet.write(json.loads(paths.run_metrics.read_text()), pl.read_parquet(paths.counterfactual_captions),
                            exported, provenance(params), params, found["evaluation"], found["validation"],
                            found["judge"], found["truth"])
    mixture_sizes = found["mixtures"]["sizes"] if found["mixtures"] else None
    validated = found["validation"]["validated_pairs"] if found["validation"] else 0
    judged = found["judge"]["rows_out"] if found["judge"] and found["judge"]["enabled"] else 0
    write_text(paths.export / "README.md", card.dataset_card(sheet, len(exported), params.export, mixture_sizes,
                                                              validated, judged, params.profile == "demo"))


REPORT = PathsCommand(report_flow, "reports/metrics.json, figures and plot data for the current run.",
                      lambda metrics: show_json(metrics["funnel"]))
EXPORT = PathsCommand(export_flow, "Write the selected pairs as a Hugging Face `datasets` folder (images embedded).",
                      lambda rows: console.print(f"{rows} rows exported"))
MIXTURES = PathsCommand(mixtures_flow, "Build the base / medium / all training mixtures as `datasets` configs.",
                        lambda result: show_json(result["sizes"]))
DATASHEET = PathsCommand(datasheet_flow, "Generate the datasheet and the dataset card that embeds it.", lambda _: None)
