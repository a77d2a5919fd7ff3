"""The export flow: the selected pairs as a Hugging Face `datasets` folder."""

from __future__ import annotations

import polars as pl
from prefect import flow

from flows.engine.console import console
from tasks.release import export
from tasks.release.provenance import provenance
from tasks.stages import Params


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


def show(rows: int) -> None:
    console.print(f"{rows} rows exported")
