"""Reading and writing stage files: schema-checked parquet in, atomic parquet/JSON out, rejects beside outputs.

A stage output is replaced atomically, so a killed run never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tasks.core.errors import UserError

DIGITS = 6  # floats written to metrics JSON are rounded to this many digits


class SameFileError(UserError):
    """The output path is the input file; writing would destroy the input."""


def check_distinct(source: Path, output: Path) -> None:
    """Raise `SameFileError` when `output` is the same file as `source` (any spelling, symlink or hard link)."""
    source, output = Path(source), Path(output)
    same = source.resolve() == output.resolve()
    if same or (source.exists() and output.exists() and os.path.samefile(source, output)):
        raise SameFileError(f"{output}: is the input file {source}; refusing to overwrite it")


class SchemaError(UserError):
    """An input file is missing, unreadable, or lacks columns its stage needs."""


def rejects_path(output: Path) -> Path:
    """`x/counterfactuals.parquet` -> `x/counterfactuals.rejects.parquet`."""
    return output.with_suffix(".rejects.parquet")


def check_input(path: Path, schema: dict[str, pl.DataType], produced_by: str) -> None:
    """Raise a one-line SchemaError unless `path` is a parquet file holding every column of `schema`."""
    if not Path(path).is_file():
        raise SchemaError(f"input {path} does not exist: run `cfgen {produced_by}` first")
    try:
        columns = pl.read_parquet_schema(path)
    except Exception as err:  # polars raises several error types for a file that is not parquet
        raise SchemaError(f"input {path} is not a parquet file ({type(err).__name__})") from None
    missing = [c for c in schema if c not in columns]
    if missing:
        raise SchemaError(f"input {path} lacks columns {missing}: expected the output of `cfgen {produced_by}`")


def read_frame(path: Path, schema: dict[str, pl.DataType], produced_by: str) -> pl.DataFrame:
    """The columns of `schema` from `path` (checked by `check_input`), cast to their types."""
    check_input(path, schema, produced_by)
    return pl.read_parquet(path, columns=list(schema)).select([pl.col(c).cast(t) for c, t in schema.items()])


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


def source_image_paths(image_ids: Iterable[str], folder: Path | None, pattern: str) -> list[Path | None]:
    """Each image id's real image file under `folder` (`pattern` formats `image_id`, an int when it is all digits:
    COCO's `{image_id:0>12}.jpg`), None where there is no folder or no such file."""
    if folder is None:
        return [None for _ in image_ids]
    paths = [folder / pattern.format(image_id=int(i) if i.isdigit() else i) for i in image_ids]
    return [p if p.is_file() else None for p in paths]


def read_rgb(path: Path) -> np.ndarray:
    """An image file's pixels as HxWx3 uint8 RGB."""
    from PIL import Image  # here: most stages read no image, and the CLI starts without PIL

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def plain(value: Any) -> Any:
    """`value` as JSON types: mappings with str keys, lists, rounded finite floats (None otherwise)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return round(float(value), DIGITS) if math.isfinite(value) else None
    return value
