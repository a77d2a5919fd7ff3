"""Stage files: schema-checked parquet in, outputs checked writable before any work, rejects beside outputs.

An input is read whole and checked against its schema (`read_frame`: a one-line `SchemaError` when it is not what its
stage wrote), after completing any publication of it a run left half done (`writing.finish_publication`). An output
and its rejects are replaced together (`write_outputs`; atomic, journaled: `tasks.core.writing`), so two runs on one
output leave one run's output beside that same run's rejects, each file whole. Outputs are checked writable
(`check_outputs`) and distinct from the input (`check_distinct`) before any work starts. A folder of files published
with its table: `tasks.core.publication`.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tasks.core import schemas
from tasks.core.errors import UserError
from tasks.core.writing import OutputError, finish_publication, os_reason, write_frames

DIGITS = 6  # floats written to metrics JSON are rounded to this many digits
MADE_BY = "cfgen.key"  # parquet metadata: the key of the unit that made a stage output (`write_outputs`)


class SameFileError(UserError):
    """Two paths a command reads and writes, or writes twice, are one file; writing would destroy one of them."""


def _same(a: Path, b: Path) -> bool:
    """One file under any spelling, a symlink or a hard link."""
    return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))


def check_distinct(source: Path, output: Path, metrics: Path | None = None, params_file: Path | None = None) -> None:
    """Raise `SameFileError` unless the files a command writes (`output`, its rejects, `metrics`) are distinct from
    each other and from the files it reads (`source`, `params_file`)."""
    writes = [Path(output), rejects_path(Path(output)), *([Path(metrics)] if metrics else [])]
    for i, path in enumerate(writes):
        if read := next((r for r in (source, params_file) if r is not None and _same(Path(r), path)), None):
            raise SameFileError(f"{path}: is the input file {read}; refusing to overwrite it")
        clash = next((other for other in writes[:i] if _same(other, path)), None)
        if clash:
            raise SameFileError(f"{path}: is also {clash}, which this command writes too: give each its own path")


class SchemaError(UserError):
    """An input file is missing, unreadable, or lacks columns its stage needs."""


def rejects_path(output: Path) -> Path:
    """`x/counterfactuals.parquet` -> `x/counterfactuals.rejects.parquet`; a one-line `OutputError` for a path with
    no name (`.`, `/`, `''`), a folder that no file can replace."""
    if not Path(output).name:
        raise OutputError(f"cannot write {output}: it is a directory")
    return output.with_suffix(".rejects.parquet")


def not_a_file(path: Path) -> str | None:
    """Why `path` is no regular file to read ("does not exist", "is a directory", ...), None when it is one."""
    if Path(path).is_file():
        return None
    if Path(path).is_dir():
        return "is a directory"
    return "is no regular file (a device, FIFO or socket)" if Path(path).exists() else "does not exist"


def check_source(source: Path) -> None:
    """Raise a one-line `UserError` unless the caption file `source` (JSON or TSV, read by ingest) is a file."""
    if why := not_a_file(source):
        raise UserError(f"caption file {source} {why}")


def _command(stage: str) -> str:
    """The command that runs `stage`, as a message names it: `cfgen removal-selection`."""
    return f"`cfgen {stage.replace('_', '-')}`"


def check_input(path: Path, schema: schemas.Schema, produced_by: str) -> None:
    """Raise a one-line SchemaError unless `path` is a parquet file holding every column of `schema` (a publication
    of it a run left half done is completed first)."""
    if not Path(path).is_dir():  # a folder is no half-published file
        finish_publication(Path(path))
    command = _command(produced_by)
    if why := not_a_file(path):
        hint = f"run {command} first" if why == "does not exist" else f"expected the parquet output of {command}"
        raise SchemaError(f"input {path} {why}: {hint}")
    try:
        columns = pl.read_parquet_schema(path)
    except Exception as err:  # polars raises several error types for a file that is not parquet
        raise SchemaError(f"input {path} is not a parquet file ({type(err).__name__}): expected the output of "
                          f"{command}") from None
    missing = [c for c in schema if c not in columns]
    if missing:
        raise SchemaError(f"input {path} lacks columns {missing}: expected the output of {command}")


def _fits(actual: pl.DataType, expected: pl.DataType | type[pl.DataType]) -> bool:
    """Whether a column of type `actual` holds `expected` values without a change of meaning (a wider integer, an
    integer as a float, a categorical as text; nulls)."""
    if actual == expected or actual == pl.Null:
        return True
    if expected == pl.String:
        return isinstance(actual, (pl.Categorical, pl.Enum))
    return expected.is_numeric() and actual.is_integer() and (expected.is_float() or expected.is_integer())


def read_frame(path: Path, schema: schemas.Schema, produced_by: str) -> pl.DataFrame:
    """The columns of `schema` from `path` (checked by `check_input`), cast to their types; read from one open file,
    so a publication renaming a new version in meanwhile is not half seen. A column of another type, a null where no
    stage writes one (`schemas.REQUIRED`) or a row breaking `schemas.checks` is a one-line SchemaError: the file is
    not what `produced_by` wrote."""
    check_input(path, schema, produced_by)
    command = _command(produced_by)
    with open(path, "rb") as file:
        frame = pl.read_parquet(file, columns=list(schema))
    wrong = next((c for c, t in schema.items() if not _fits(frame.schema[c], t)), None)
    if wrong:
        raise SchemaError(f"input {path}: column {wrong} is {frame.schema[wrong]}, expected {schema[wrong]} (the "
                          f"output of {command})")
    try:
        frame = frame.select([pl.col(c).cast(t) for c, t in schema.items()])
    except pl.exceptions.PolarsError:  # an integer too large for its column
        raise SchemaError(f"input {path}: values out of their columns' range (expected the output of "
                          f"{command})") from None
    broken = [(f"null {c}", pl.col(c).is_null()) for c in schema if c in schemas.REQUIRED] + \
             [(words, ~rule) for rule, words in schemas.checks(schema)]
    for words, breaks in broken:
        rows = frame.with_row_index().filter(breaks.fill_null(False))["index"]
        if len(rows):
            raise SchemaError(f"input {path}: {len(rows)} row(s) break `{words}` (first: row {rows[0]}): not the "
                              f"output of {command}")
    return frame


def _check_writable(folder: Path, target: Path) -> None:
    """One-line `OutputError` about `target` unless `folder`, or its nearest existing parent, is a directory in which a
    file can be created (tried for real, so a read-only or immutable folder, `/sys` or `/proc` fail even for root)."""
    existing = next(p for p in (folder, *folder.parents) if os.path.lexists(p))
    if not existing.is_dir():
        raise OutputError(f"cannot write {target}: {existing} is not a directory")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=f".{target.name}.", suffix=".probe"):
            pass
    except OSError as err:
        raise OutputError(f"cannot write {target}: {existing} is not writable ({os_reason(err)})") from None


def check_outputs(output: Path, metrics: Path | None = None) -> None:
    """Raise a one-line `OutputError` unless `output`, its rejects and `metrics` (when given) can be written: none is
    a directory, a device, a FIFO or a socket, and each one's folder can take a new file (`_check_writable`). Creates
    no folder and leaves no file behind."""
    for path in (Path(output), rejects_path(Path(output)), *([Path(metrics)] if metrics else [])):
        if path.is_dir():
            raise OutputError(f"cannot write {path}: it is a directory")
        if os.path.lexists(path) and not (path.is_file() or path.is_symlink()):
            raise OutputError(f"cannot write {path}: it is not a regular file (a device, FIFO or socket)")
        _check_writable(path.parent, path)


def check_folder(folder: Path) -> None:
    """Raise a one-line `OutputError` unless a command can fill `folder` (made when missing): `_check_writable`."""
    _check_writable(Path(folder), Path(folder))


def write_outputs(kept: pl.DataFrame, rejects: pl.DataFrame, output: Path, key: str | None = None) -> None:
    """A step's output and, beside it, its rejects (`rejects_path`), replaced together or not at all; `key`, when
    given, is the key of the unit that made them (its params, models and code), recorded in each (`made_by`)."""
    write_frames({Path(output): kept, rejects_path(Path(output)): rejects}, None if key is None else {MADE_BY: key})


def made_by(path: Path) -> str | None:
    """The key `write_outputs` recorded in the parquet file `path` (None: none was)."""
    return pl.read_parquet_metadata(path).get(MADE_BY)


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
