"""Atomic, journaled file publication: a written file is replaced whole (a temporary beside it, renamed in once
complete), so a killed run never leaves a half-written file behind; files written together (`write_frames`) are one
publication: a run killed between their renames is completed by the next reader (`finish_publication`) or writer, and
runs writing into one folder publish one at a time (a flock on the folder). An OSError while writing (disk full, ...)
is a one-line `OutputError` naming the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.errors import UserError


class OutputError(UserError):
    """An output cannot be written: its folder is missing and cannot be made, is not writable, or writing failed."""


def os_reason(err: OSError) -> str:
    """The OS's words for `err` ("No space left on device"), without the file name."""
    return err.strerror or (os.strerror(err.errno) if err.errno else str(err))


def _journal(path: Path) -> Path:
    return path.with_name(f".{path.name}.publishing")


@contextlib.contextmanager
def _publishing(paths: Iterable[Path]) -> Iterator[None]:
    """Hold the folders of `paths` (each an flock on the folder itself, in one order: no lock file is left, and a
    killed run's lock is gone with it). A folder that cannot be locked (some network file systems) is not held."""
    with contextlib.ExitStack() as held:
        for folder in sorted({Path(p).parent.resolve() for p in paths}):
            try:
                descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue  # not there yet or unreadable: writing into it fails with its own one-line error
            held.callback(os.close, descriptor)
            with contextlib.suppress(OSError):
                fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield


def _finish(journal: Path) -> None:
    if not journal.is_file():
        return
    pairs = [(Path(temporary), Path(target)) for temporary, target in json.loads(journal.read_text())]
    for temporary, target in pairs:
        if temporary.exists():
            os.replace(temporary, target)
    for _, target in pairs:
        _journal(target).unlink(missing_ok=True)


def finish_publication(path: Path) -> None:
    """Complete the publication of `path` and the files written with it (`_replace_together`) that a run stopped
    between its renames: every complete temporary its journal names is renamed in, then the journals go."""
    journal = _journal(Path(path))
    if journal.is_file():
        with _publishing([path]):
            _finish(journal)  # gone if a run publishing meanwhile held the folder: it has finished


def _replace_together(writers: dict[Path, Callable[[Path], Any]]) -> None:
    """Write each path with `writers[path](temporary)` to a temporary beside it and rename them into place only once
    every one is complete: a failed write changes no path and leaves no temporary. Several paths are one
    publication: once every temporary is complete, a journal beside each path names them all before the first
    rename, so a run stopped between two renames is completed by the next reader (`finish_publication`, called by
    `io.check_input`) or writer: never an output beside another run's rejects. The folders are held throughout
    (`_publishing`). An OSError is an `OutputError`."""
    temporaries: dict[Path, Path] = {}
    committed = False
    with contextlib.ExitStack() as held:  # held until a failed run's temporaries are gone: they are the next run's
        try:
            for path in writers:
                path.parent.mkdir(parents=True, exist_ok=True)
            held.enter_context(_publishing(writers))
            for path, write in writers.items():
                _finish(_journal(path))
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
            raise OutputError(f"cannot write {path}: {os_reason(err)}") from err
        finally:
            for temporary in () if committed else temporaries.values():
                with contextlib.suppress(OSError):  # an unwritable folder: nothing was created in it either
                    temporary.unlink(missing_ok=True)


def write_frame(frame: pl.DataFrame, path: Path) -> None:
    """Write atomically: a killed run never leaves a half-written output behind."""
    _replace_together({Path(path): frame.write_parquet})


def write_frames(frames: dict[Path, pl.DataFrame], metadata: dict[str, str] | None = None) -> None:
    """Several outputs of one step, replaced together or not at all; `metadata`: key-value metadata of each file."""
    _replace_together({Path(path): functools.partial(frame.write_parquet, metadata=metadata)
                       for path, frame in frames.items()})


def finite(value: Any) -> Any:
    """`value` with every float that is not finite (NaN, ±inf) as None, in its lists, tuples and dicts at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def json_text(data: Any, **options: Any) -> str:
    """`data` as strict JSON (RFC 8259, which every parser reads): a float that is not finite is null (`finite`), never
    the `NaN` or `Infinity` Python writes by default. Every JSON file the project writes is written through this."""
    return json.dumps(finite(data), allow_nan=False, **options)


def write_json(data: dict, path: Path) -> None:
    """Write `data` as indented, key-sorted JSON (`json_text`), atomically."""
    write_text(path, json_text(data, indent=2, sort_keys=True) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path`, atomically."""
    _replace_together({Path(path): lambda temporary: temporary.write_text(text)})


def write_file(path: Path, write: Callable[[Path], Any]) -> None:
    """Write `path` with `write(temporary)` to a temporary beside it, renamed into place once complete (atomic)."""
    _replace_together({Path(path): write})
