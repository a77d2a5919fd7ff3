"""A folder of content-addressed files and the table naming them, published together (`held_folder`,
`publish_folder`): whenever a run is killed, every file the table in place names is in the folder, and one run at a
time, for one table only, writes a folder. A folder of whole files that is itself the output (a `datasets` config's
shards) is built aside and replaced the same way (`replaced_folder`).

A folder cfgen fills is one cfgen made: each publication names the files it writes there (`names`, a pattern of
their paths in the folder), a folder holding any other file is refused in one line before anything changes
(`check_filled`), and nothing is pruned that the pattern does not name.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from filelock import FileLock, Timeout

from tasks.core.errors import UserError

T = TypeVar("T")
STORED_PNG = re.compile(r"[0-9a-f]{2}/[0-9a-f]{40}\.png")  # a pixel-addressed PNG's name (`tasks.image.store`)


MOST_COUNTED = 100  # the walk stops at this many foreign files: `/` or a home folder is refused at once


def _foreign(folder: Path, names: re.Pattern) -> Iterator[str]:
    """The paths in `folder` of its files (a link counts as a file, and is not followed) that `names` does not match
    whole, walked in name order."""
    for root, folders, files in os.walk(folder):
        links = [name for name in folders if os.path.islink(os.path.join(root, name))]
        folders[:] = sorted(set(folders) - set(links))
        for name in sorted(files + links):
            if not names.fullmatch(path := Path(root, name).relative_to(folder).as_posix()):
                yield path


def check_filled(folder: Path, names: re.Pattern) -> None:
    """Raise a one-line `UserError` unless every file under `folder` (none when it is absent; a link counts as a
    file) is one cfgen writes there: its path in the folder matches `names` whole. A folder holding anything else is
    not one cfgen made: publishing into it would prune what cfgen did not write, or write through a link."""
    foreign = list(itertools.islice(_foreign(Path(folder), names), MOST_COUNTED))
    if foreign:
        count = len(foreign) if len(foreign) < MOST_COUNTED else f"at least {MOST_COUNTED}"
        raise UserError(f"{folder} holds {count} file(s) cfgen does not write there (first: {min(foreign)!r}): "
                        "it is not a folder cfgen filled; move them out or give this run another folder (nothing "
                        "was changed)")


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
def held_folder(folder: Path, table: Path, names: re.Pattern) -> Iterator[Path]:
    """The staging folder (`staging_folder`) of `folder`, whose files `table` names, `held` by this run while it
    builds and publishes, and for this table only: a run whose table is not the one `folder` belongs to is one line
    (the marker beside it; a table since deleted gives it up): publishing prunes what its own table does not name,
    which would delete the files of the other's. A folder holding a file `names` does not match is refused first
    (`check_filled`)."""
    folder, table = Path(folder), Path(table)
    with held(folder):
        check_filled(folder, names)
        owner, marker = os.path.relpath(table, folder.parent), folder.with_name(f".{folder.name}.table")
        named = marker.read_text() if marker.is_file() else None
        if named not in (None, owner) and (folder.parent / named).is_file():
            raise UserError(f"{folder} holds the files of {folder.parent / named}, not of {table}: give this run its "
                            "own folder (its table would be published with files the other no longer has)")
        marker.write_text(owner)
        yield staging_folder(folder)


@contextlib.contextmanager
def replaced_folder(folder: Path, names: re.Pattern) -> Iterator[Path]:
    """A staging folder (`staging_folder`) whose files, each named as `names` matches, become exactly `folder`'s when
    the block ends without error (`publish_folder`), `folder` `held` by this run meanwhile: a run killed while
    building leaves the old files, and the old and new ones are together only between the last rename in and the
    prune. A folder holding a file `names` does not match is refused first (`check_filled`)."""
    with held(folder):
        check_filled(folder, names)
        staged = staging_folder(folder)
        yield staged
        publish_folder(staged, folder, lambda: None, names)


def publish_folder(staged: Path, folder: Path, write_table: Callable[[], T], names: re.Pattern) -> T:
    """Make `folder` hold exactly the files built in `staged` (`staging_folder`), each named as `names` matches,
    calling `write_table()`, which replaces the table naming them, in between; returns its result. A folder holding
    a file `names` does not match is refused before anything changes (`check_filled`), and none is ever pruned.

    Invariant, wherever a run is killed: every file the table in place names is in `folder`. Files are named by
    their content (`tasks.image.store`), so a staged file renamed over one of the same name changes no file the old
    table names; all are renamed in before `write_table` replaces the table, and the files it no longer names leave
    only after. A kill leaves the last good table with a superset of its files; the next run's `staging_folder` and
    `prune` remove what is left over."""
    staged, folder = Path(staged), Path(folder)
    check_filled(folder, names)
    built = {path.relative_to(staged).as_posix() for path in staged.rglob("*") if path.is_file()}
    folder.mkdir(parents=True, exist_ok=True)
    for name in sorted(built):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged / name, folder / name)
    result = write_table()
    prune(folder, built, names)
    prune(staged, set(), names)  # only emptied folders are left: removed without opening any
    staged.rmdir()
    return result


def prune(folder: Path, keep: set[str], names: re.Pattern) -> None:
    """Remove every file under `folder` whose relative path matches `names` (one cfgen writes there) and is not in
    `keep`, then every folder left empty; any other file stays."""
    for path in sorted(Path(folder).rglob("*"), reverse=True):  # a folder's files before the folder
        relative = path.relative_to(folder).as_posix()
        if path.is_dir() and not path.is_symlink():
            if not any(path.iterdir()):
                path.rmdir()
        elif relative not in keep and names.fullmatch(relative):
            path.unlink()
