"""Reading and writing stage files: schema-checked parquet in, atomic parquet/JSON out, rejects beside outputs.

A stage output is replaced atomically, so a killed run never leaves a half-written file behind; an output and its
rejects are replaced together: a run killed between the two renames is completed by the next reader or writer.
Outputs are checked writable (`check_outputs`) before any work starts, and an OSError while writing (disk full, ...)
is a one-line `OutputError` naming the file.

A folder of content-addressed files and the table naming them are published together (`held_folder`,
`publish_folder`): whenever a run is killed, every file the table in place names is in the folder, and one run at a
time, for one table only, writes a folder.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import polars as pl
from filelock import FileLock, Timeout

from tasks.core.errors import UserError

DIGITS = 6  # floats written to metrics JSON are rounded to this many digits
T = TypeVar("T")


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
    """Raise a one-line SchemaError unless `path` is a parquet file holding every column of `schema` (a publication
    of it a run left half done is completed first)."""
    finish_publication(Path(path))
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


class OutputError(UserError):
    """An output cannot be written: its folder is missing and cannot be made, is not writable, or writing failed."""


def _reason(err: OSError) -> str:
    """The OS's words for `err` ("No space left on device"), without the file name."""
    return err.strerror or (os.strerror(err.errno) if err.errno else str(err))


def check_outputs(output: Path, metrics: Path | None = None) -> None:
    """Raise a one-line `OutputError` unless `output`, its rejects and `metrics` (when given) can be written: each
    one's nearest existing folder is a directory in which a file can be created (tried for real, so a read-only or
    immutable folder, `/sys` or `/proc` fail even for root). Creates no folder and leaves no file behind."""
    for path in (Path(output), rejects_path(Path(output)), *([Path(metrics)] if metrics else [])):
        if path.is_dir():
            raise OutputError(f"cannot write {path}: it is a directory")
        folder = next(p for p in path.parents if os.path.lexists(p))
        if not folder.is_dir():
            raise OutputError(f"cannot write {path}: {folder} is not a directory")
        try:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.", suffix=".probe"):
                pass
        except OSError as err:
            raise OutputError(f"cannot write {path}: {folder} is not writable ({_reason(err)})") from None


def _journal(path: Path) -> Path:
    return path.with_name(f".{path.name}.publishing")


def finish_publication(path: Path) -> None:
    """Complete the publication of `path` and the files written with it (`_replace_together`) that a run stopped
    between its renames: every complete temporary its journal names is renamed in, then the journals go."""
    journal = _journal(Path(path))
    if not journal.is_file():
        return
    pairs = [(Path(temporary), Path(target)) for temporary, target in json.loads(journal.read_text())]
    for temporary, target in pairs:
        if temporary.exists():
            os.replace(temporary, target)
    for _, target in pairs:
        _journal(target).unlink(missing_ok=True)


def _replace_together(writers: dict[Path, Callable[[Path], Any]]) -> None:
    """Write each path with `writers[path](temporary)` to a temporary beside it and rename them into place only once
    every one is complete: a failed write changes no path and leaves no temporary. Several paths are one
    publication: once every temporary is complete, a journal beside each path names them all before the first
    rename, so a run stopped between two renames is completed by the next reader (`finish_publication`, called by
    `check_input`) or writer: never an output beside another run's rejects. An OSError is an `OutputError`."""
    temporaries: dict[Path, Path] = {}
    committed = False
    try:
        for path, write in writers.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            finish_publication(path)
            temporaries[path] = path.with_name(f".{path.name}.tmp")
            write(temporaries[path])
        if len(temporaries) > 1:
            entries = json.dumps([[str(t), str(p)] for p, t in temporaries.items()])
            for path in temporaries:
                written = _journal(path).with_name(f"{_journal(path).name}.tmp")
                written.write_text(entries)
                os.replace(written, _journal(path))
        committed = True
        for path, temporary in temporaries.items():
            os.replace(temporary, path)
        for path in temporaries:
            _journal(path).unlink(missing_ok=True)
    except OSError as err:
        raise OutputError(f"cannot write {path}: {_reason(err)}") from err
    finally:
        for temporary in () if committed else temporaries.values():
            with contextlib.suppress(OSError):  # an unwritable folder: nothing was created in it either
                temporary.unlink(missing_ok=True)


def write_frame(frame: pl.DataFrame, path: Path) -> None:
    """Write atomically: a killed run never leaves a half-written output behind."""
    _replace_together({Path(path): frame.write_parquet})


def write_outputs(kept: pl.DataFrame, rejects: pl.DataFrame, output: Path) -> None:
    """A step's output and, beside it, its rejects (`rejects_path`), replaced together or not at all."""
    _replace_together({Path(output): kept.write_parquet, rejects_path(Path(output)): rejects.write_parquet})


def write_json(data: dict, path: Path) -> None:
    """Write `data` as indented, key-sorted JSON, atomically."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    _replace_together({Path(path): lambda temporary: temporary.write_text(text)})


def write_file(path: Path, write: Callable[[Path], Any]) -> None:
    """Write `path` with `write(temporary)` to a temporary beside it, renamed into place once complete (atomic)."""
    _replace_together({Path(path): write})


def staging_folder(folder: Path) -> Path:
    """An empty sibling of `folder` (same filesystem: moving a file in is a rename) to build its next version in;
    what a killed run left there is removed first."""
    staged = Path(folder).with_name(f".{Path(folder).name}.staging")
    if staged.exists():
        shutil.rmtree(staged)
    staged.mkdir(parents=True)
    return staged


@contextlib.contextmanager
def held_folder(folder: Path, table: Path) -> Iterator[Path]:
    """The staging folder (`staging_folder`) of `folder`, whose files `table` names, held by this run alone while it
    builds and publishes: another run on `folder` is one line (a lock beside it), and so is a run whose table is not
    the one `folder` belongs to (the marker beside it; a table since deleted gives it up): publishing prunes what its
    own table does not name, which would delete the files of the other's."""
    folder, table = Path(folder), Path(table)
    lock = FileLock(folder.with_name(f".{folder.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise UserError(f"another run is writing {folder}: wait for it, or give this run its own folder") from None
    try:
        owner, marker = os.path.relpath(table, folder.parent), folder.with_name(f".{folder.name}.table")
        named = marker.read_text() if marker.is_file() else None
        if named not in (None, owner) and (folder.parent / named).is_file():
            raise UserError(f"{folder} holds the files of {folder.parent / named}, not of {table}: give this run its "
                            "own folder (its table would be published with files the other no longer has)")
        marker.write_text(owner)
        yield staging_folder(folder)
    finally:
        lock.release()


def publish_folder(staged: Path, folder: Path, write_table: Callable[[], T]) -> T:
    """Make `folder` hold exactly the files built in `staged` (`staging_folder`), calling `write_table()`, which
    replaces the table naming them, in between; returns its result.

    Invariant, wherever a run is killed: every file the table in place names is in `folder`. Files are named by
    their content (`tasks.image.store`), so a staged file renamed over one of the same name changes no file the old
    table names; all are renamed in before `write_table` replaces the table, and the files it no longer names leave
    only after. A kill leaves the last good table with a superset of its files; the next run's `staging_folder` and
    `prune` remove what is left over."""
    staged, folder = Path(staged), Path(folder)
    names = {path.relative_to(staged).as_posix() for path in staged.rglob("*") if path.is_file()}
    folder.mkdir(parents=True, exist_ok=True)
    for name in sorted(names):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged / name, folder / name)
    result = write_table()
    prune(folder, names)
    prune(staged, set())  # only emptied folders are left: removed without opening any
    staged.rmdir()
    return result


def prune(folder: Path, keep: set[str]) -> None:
    """Remove every file under `folder` whose relative path is not in `keep`, then every folder left empty."""
    for path in sorted(Path(folder).rglob("*"), reverse=True):  # a folder's files before the folder
        if path.is_dir() and not path.is_symlink():
            if not any(path.iterdir()):
                path.rmdir()
        elif path.relative_to(folder).as_posix() not in keep:
            path.unlink()


def source_image_paths(image_ids: Iterable[str], folder: Path | None, pattern: str) -> list[Path | None]:
    """Each image id's real image file under `folder` (`pattern` formats `image_id`, an int when it is all digits:
    COCO's `{image_id:0>12}.jpg`), None where there is no folder or no such file in it: an id whose name climbs out
    (`../../tmp/x`, an absolute path) or that no file system can hold (too long) has no real image. (A link the user
    put in the folder is theirs to follow.)"""
    if folder is None:
        return [None for _ in image_ids]
    root = os.path.abspath(folder)

    def inside(image_id: str) -> Path | None:
        name = pattern.format(image_id=int(image_id) if image_id.isdigit() else image_id)
        path = os.path.normpath(os.path.join(root, name))  # `..` resolved by name: links are not followed
        return folder / name if os.path.commonpath([root, path]) == root and os.path.isfile(path) else None

    return [inside(i) for i in image_ids]


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
