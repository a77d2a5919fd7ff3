"""The removal_export stage: the pairs as a `datasets` folder with its card."""

from __future__ import annotations

import json

import polars as pl
from prefect import flow

from tasks.core.fields import keyed_dump
from tasks.core.fingerprints import fingerprint
from tasks.core.io import read_frame
from tasks.core.schemas import REMOVAL_PAIRS, REMOVAL_SPLITS
from tasks.core.writing import write_text
from tasks.release import export
from tasks.removal import release
from tasks.stages import Params, stages, table


@flow(name="removal-export")
def removal_export_flow(params: Params) -> dict:
    """The pairs as a `datasets` folder (a parquet split each, images embedded) with its card; returns split sizes."""
    paths = params.paths
    rows = release.dataset_rows(read_frame(paths.removal_pairs, REMOVAL_PAIRS, "removal_selection"))
    parts = {split: rows.filter(pl.col("split") == split) for split in REMOVAL_SPLITS}
    export.write_dataset(parts, paths.inpainted_images, paths.removal_export, params.export)
    splits = {split: part.height for split, part in parts.items()}
    removal = [name for name in stages() if name in table("removal_export").after]  # what it reads, in DAG order
    metrics = {name: json.loads((paths.metrics / f"{name}.json").read_text()) for name in removal}
    settings = {name: keyed_dump(getattr(params, name)) for name in removal}
    if params.inpaint.fill == "inpaint":
        settings["inpaint"]["model"] = fingerprint(params.inpaint.model)
    write_text(paths.removal_export / "README.md", release.card(metrics, splits, settings))
    return splits
