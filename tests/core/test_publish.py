"""A folder published with its table (`publication.publish_folder`): a process SIGKILLed at each of its
file-system changes in turn (every rename, unlink and rmdir, from staging to the last prune) leaves every PNG the
table in place names, intact; a rerun then leaves exactly the new table's PNGs and no staging folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl

from tasks.core.images import read_rgb
from tasks.image import store
from tests.conftest import ROOT

# The child: stages one 4x4 PNG per shade, then publishes them with their table; SIGKILLs itself at its KILL_AT-th
# change (0: never) and prints how many changes it made.
CHILD = """
import os, signal, sys
from pathlib import Path

import numpy as np
import polars as pl

from tasks.core.writing import write_frame
from tasks.core.publication import STORED_PNG, publish_folder, staging_folder
from tasks.image import store

folder, kill_at, shades, changes = Path(sys.argv[1]), int(sys.argv[2]), map(int, sys.argv[3].split(",")), [0]


def counted(change):
    def call(*args, **kwargs):
        changes[0] += 1
        if changes[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return change(*args, **kwargs)
    return call


os.replace, os.unlink, os.rmdir = counted(os.replace), counted(os.unlink), counted(os.rmdir)
staged = staging_folder(folder)
names = [store.write_png(staged, np.full((4, 4, 3), shade, np.uint8)) for shade in shades]
publish_folder(staged, folder, lambda: write_frame(pl.DataFrame({"png": names}), folder.with_suffix(".parquet")),
               STORED_PNG)
print(changes[0])
"""


def publish_child(folder: Path, kill_at: int = 0, shades: str = "1,2,3") -> subprocess.CompletedProcess:
    """The child's run: by default the new table (shades 1, 2, 3), without a kill."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", CHILD, str(folder), str(kill_at), shades], env=env,
                          capture_output=True, text=True, timeout=120)


def named_pngs_intact(folder: Path) -> list[str]:
    """The PNGs the table in place names; asserts each is in `folder` and decodes to the pixels its name hashes."""
    names = pl.read_parquet(folder.with_suffix(".parquet"))["png"].to_list()
    for name in names:
        assert store.image_path(read_rgb(folder / name)) == name, name
    return names


def files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_a_sigkill_at_any_change_of_a_publication_leaves_the_tables_pngs_and_a_rerun_repairs(tmp_path):
    old = "0,1"  # the old table: shade 1 is kept, shade 0 dropped
    assert publish_child(tmp_path / "count" / "images", shades=old).returncode == 0
    complete = publish_child(tmp_path / "count" / "images")
    assert complete.returncode == 0, complete.stderr
    total = int(complete.stdout)
    assert total >= 8  # staging, 3 PNGs, 3 renames in, the table, the prune
    for kill_at in range(1, total + 1):
        folder = tmp_path / str(kill_at) / "images"
        assert publish_child(folder, shades=old).returncode == 0
        killed = publish_child(folder, kill_at)
        assert killed.returncode == -signal.SIGKILL, (kill_at, killed.stderr)
        assert len(named_pngs_intact(folder)) in (2, 3), kill_at
        assert publish_child(folder).returncode == 0
        assert files(folder) == set(named_pngs_intact(folder)) and len(files(folder)) == 3, kill_at
        assert sorted(p.name for p in folder.parent.iterdir()) == ["images", "images.parquet"], kill_at
