"""The datasheet flow: the datasheet and the dataset card that embeds it."""

from __future__ import annotations

import json

import polars as pl
from prefect import flow

from tasks.core.io import SchemaError, not_a_file, read_frame
from tasks.core.schemas import COUNTERFACTUALS
from tasks.core.writing import write_text
from tasks.release import card, datasheet
from tasks.release.provenance import provenance
from tasks.stages import Params


def check(params: Params) -> None:
    """The export and the report the datasheet describes are there (else one line naming the command that makes
    each)."""
    paths = params.paths
    if not any((paths.export / "data").glob("*.parquet")):
        raise SchemaError(f"input {paths.export / 'data'} holds no parquet shard: run `cfgen export` first")
    if why := not_a_file(paths.run_metrics):
        raise SchemaError(f"input {paths.run_metrics} {why}: run `cfgen report` first")


@flow(name="datasheet")
def datasheet_flow(params: Params) -> None:
    """The datasheet and the dataset card, from the report's metrics and what the export holds."""
    paths = params.paths
    exported = pl.scan_parquet(paths.export / "data" / "*.parquet").select("id").collect()["id"].to_list()
    found = {name: json.loads(path.read_text()) if path.is_file() else None for name, path in (
        ("evaluation", paths.evaluation_reports / "metrics.json"), ("mixtures", paths.metrics / "mixtures.json"),
        ("validation", paths.metrics / "validation.json"), ("judge", paths.metrics / "judge.json"),
        ("truth", paths.metrics / "truth.json"))}
    sheet = datasheet.write(json.loads(paths.run_metrics.read_text()),
                            read_frame(paths.counterfactual_captions, COUNTERFACTUALS, "perplexity"), exported,
                            provenance(params), params, found["evaluation"], found["validation"], found["judge"],
                            found["truth"])
    mixture_sizes = found["mixtures"]["sizes"] if found["mixtures"] else None
    validated = found["validation"]["validated_pairs"] if found["validation"] else 0
    judged = found["judge"]["rows_out"] if found["judge"] and found["judge"]["enabled"] else 0
    write_text(paths.export / "README.md", card.dataset_card(sheet, len(exported), params.export, mixture_sizes,
                                                              validated, judged, params.profile == "demo"))
