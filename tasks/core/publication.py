"""A folder of content-addressed files and the table naming them, published together (`held_folder`,
`publish_folder`): whenever a run is killed, every file the table in place names is in the folder, and one run at a
time, for one table only, writes a folder. A folder of whole files that is itself the output (a `datasets` config's
shards) is built aside and replaced the same way (`replaced_folder`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from filelock import FileLock, Timeout

from tasks.core.errors import UserError

T = TypeVar("T")


def staging_folder(folder: Path) -> Path:
    """An empty sibling of `folder` (same filesystem: moving a file in is a rename) to build its next version in;
    what a killed run left there is removed first."""
    staged = Path(folder).with_name(f".{Path(folder).name}.staging")
    if staged.exists():
        shutil.rmtree(staged)
    staged.mkdir(parents=True)
    return staged


@contextlib.contextmanager
def held(folder: Path) -> Iterator[None]:
    """`folder` written by this run alone (a lock beside it): another run on it is one line."""
    folder = Path(folder)
    lock = FileLock(folder.with_name(f".{folder.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise UserError(f"another run is writing {folder}: wait for it, or give this run its own folder") from None
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def held_folder(folder: Path, table: Path) -> Iterator[Path]:
    """The staging folder (`staging_folder`) of `folder`, whose files `table` names, `held` by this run while it
    builds and publishes, and for this table only: a run whose table is not the one `folder` belongs to is one line
    (the marker beside it; a table since deleted gives it up): publishing prunes what its own table does not name,
    which would delete the files of the other's."""
    folder, table = Path(folder), Path(table)
    with held(folder):
        owner, marker = os.path.relpath(table, folder.parent), folder.with_name(f".{folder.name}.table")
        named = marker.read_text() if marker.is_file() else None
        if named not in (None, owner) and (folder.parent / named).is_file():
            raise UserError(f"{folder} holds the files of {folder.parent / named}, not of {table}: give this run its "
                            "own folder (its table would be published with files the other no longer has)")
        marker.write_text(owner)
        yield staging_folder(folder)


@contextlib.contextmanager
def replaced_folder(folder: Path) -> Iterator[Path]:
    """A staging folder (`staging_folder`) whose files become exactly `folder`'s when the block ends without error
    (`publish_folder`), `folder` `held` by this run meanwhile: a run killed while building leaves the old files, and
    the old and new ones are together only between the last rename in and the prune."""
    with held(folder):
        staged = staging_folder(folder)
        yield staged
        publish_folder(staged, folder, lambda: None)


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
