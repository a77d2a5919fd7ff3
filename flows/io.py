"""Reading and writing stage files: schema-checked parquet in, atomic parquet/JSON out, rejects beside outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl


class SchemaError(ValueError):
    """An input file lacks columns its stage needs."""


def rejects_path(output: Path) -> Path:
    """`x/counterfactuals.parquet` -> `x/counterfactuals.rejects.parquet`."""
    return output.with_suffix(".rejects.parquet")


def read_frame(path: Path, schema: dict[str, pl.DataType], produced_by: str) -> pl.DataFrame:
    """The columns of `schema` from `path`, cast to their types; a clear error if any is missing."""
    frame = pl.read_parquet(path)
    missing = [c for c in schema if c not in frame.columns]
    if missing:
        raise SchemaError(f"{path}: missing columns {missing}; expected the output of `cfgen {produced_by}`")
    return frame.select([pl.col(c).cast(t) for c, t in schema.items()])


def write_frame(frame: pl.DataFrame, path: Path) -> None:
    """Write atomically: a killed run never leaves a half-written output behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    frame.write_parquet(tmp)
    os.replace(tmp, path)


def write_outputs(kept: pl.DataFrame, rejects: pl.DataFrame, output: Path) -> None:
    """A step's output and, beside it, its rejects (`rejects_path`)."""
    write_frame(kept, output)
    write_frame(rejects, rejects_path(output))


def write_json(data: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
