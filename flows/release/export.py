"""The export flow: the selected pairs as a Hugging Face `datasets` folder."""

from __future__ import annotations

import polars as pl
from prefect import flow

from flows.engine.console import console
from tasks.core.io import read_frame
from tasks.core.schemas import COUNTERFACTUALS, JUDGED, SELECTED, VALIDATED
from tasks.release import export
from tasks.release.provenance import provenance
from tasks.stages import Params


@flow(name="export")
def export_flow(params: Params) -> int:
    """The selected pairs as a `datasets` folder of parquet shards (images embedded), the human-validated ones as a
    second config (`validated/`) and those the VLM judge passes as a third (`judged/`); returns the row count."""
    paths = params.paths
    judged = read_frame(paths.judged, JUDGED, "judge") if paths.judged.is_file() else None
    validated = (read_frame(paths.validated, VALIDATED, "validation")["caption_id"] if paths.validated.is_file()
                 else pl.Series(dtype=pl.String))
    rows = export.dataset_rows(read_frame(paths.selected, SELECTED, "selection"),
                               read_frame(paths.counterfactual_captions, COUNTERFACTUALS, "perplexity"),
                               provenance(params), judged)
    export.write_dataset({"train": rows}, paths.selected_images, paths.export, params.export)
    for folder, chosen in (("validated", pl.col("id").is_in(validated)), ("judged", pl.col("judge_pass"))):
        export.write_dataset({"train": rows.filter(chosen)}, paths.selected_images, paths.export, params.export,
                             folder=folder)
    return rows.height


def show(rows: int) -> None:
    console.print(f"{rows} rows exported")
