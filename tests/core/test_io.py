"""Stage file I/O: an output may never be its own input, however the two paths are spelled; outputs are checked
writable before any work; an output and its rejects are replaced together or not at all (a run killed between their
renames is completed by the next reader)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tasks.core.io import (
    OutputError,
    SameFileError,
    check_distinct,
    check_outputs,
    read_frame,
    rejects_path,
    write_outputs,
)
from tests.conftest import ROOT


def test_check_distinct_refuses_the_input_as_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.tsv").write_text("a_0\tx\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.tsv").symlink_to(tmp_path / "a.tsv")
    (tmp_path / "hard.tsv").hardlink_to(tmp_path / "a.tsv")
    for source, output in [("a.tsv", "a.tsv"), ("./a.tsv", "a.tsv"), ("a.tsv", "sub/../a.tsv"),
                           (tmp_path / "a.tsv", "a.tsv"), ("a.tsv", "link.tsv"), ("hard.tsv", "a.tsv")]:
        with pytest.raises(SameFileError) as err:
            check_distinct(Path(source), Path(output))
        assert "\n" not in str(err.value) and str(Path(output)) in str(err.value)
    assert (tmp_path / "a.tsv").read_text() == "a_0\tx\n"


def test_check_distinct_accepts_distinct_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.tsv").write_text("a_0\tx\n")
    (tmp_path / "b.tsv").write_text("a_0\tx\n")  # same content, different file
    check_distinct(Path("a.tsv"), Path("b.tsv"))
    check_distinct(Path("a.tsv"), Path("out/captions.parquet"))  # output does not exist yet


def test_check_outputs_creates_nothing_and_accepts_folders_still_to_make(tmp_path):
    check_outputs(tmp_path / "new" / "deeper" / "out.parquet", tmp_path / "metrics" / "m.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("case", ["parent-is-a-file", "output-is-a-folder", "rejects-is-a-folder", "unwritable"])
def test_check_outputs_refuses_in_one_line(tmp_path, case):
    (tmp_path / "afile").write_text("x")
    output = {"parent-is-a-file": tmp_path / "afile" / "sub" / "out.parquet", "output-is-a-folder": tmp_path,
              "rejects-is-a-folder": tmp_path / "out.parquet", "unwritable": Path("/sys/out.parquet")}[case]
    if case == "rejects-is-a-folder":
        rejects_path(output).mkdir()
    with pytest.raises(OutputError) as err:
        check_outputs(output)
    assert str(err.value).startswith("cannot write ") and "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["afile", *(["out.rejects.parquet"] *
                                                                            (case == "rejects-is-a-folder"))])


def test_write_outputs_writes_both_or_neither(tmp_path, monkeypatch):
    """ENOSPC on the rejects (the second file) through the real writer: the old output and rejects stay, no temporary
    is left, and the error names the file and the reason."""
    output = tmp_path / "out.parquet"
    write_outputs(pl.DataFrame({"a": [1]}), pl.DataFrame({"r": ["x"]}), output)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real_write, calls = pl.DataFrame.write_parquet, []

    def write_parquet(frame, file, *args, **kwargs):
        calls.append(file)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(frame, file, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", write_parquet)
    with pytest.raises(OutputError) as err:
        write_outputs(pl.DataFrame({"a": [2]}), pl.DataFrame({"r": ["y"]}), output)
    assert str(err.value) == f"cannot write {rejects_path(output)}: No space left on device"
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    monkeypatch.undo()
    write_outputs(pl.DataFrame({"a": [2]}), pl.DataFrame({"r": ["y"]}), output)
    assert pl.read_parquet(output)["a"].to_list() == [2]
    assert pl.read_parquet(rejects_path(output))["r"].to_list() == ["y"]


def test_a_run_killed_between_the_two_renames_is_completed_by_the_next_reader(tmp_path):
    """A process SIGKILLed after renaming its new output in and before its rejects: the output on disk is new and
    the rejects old, until the next reader (`read_frame`) completes the publication from its journal."""
    output = tmp_path / "out.parquet"
    write_outputs(pl.DataFrame({"a": [1]}), pl.DataFrame({"r": ["old"]}), output)
    killed = subprocess.run([sys.executable, "-c", f"""
import os, signal
import polars as pl
from tasks.core import io
real = os.replace
def replace(source, target):
    if str(target) == {str(rejects_path(output))!r}:
        os.kill(os.getpid(), signal.SIGKILL)
    real(source, target)
io.os.replace = replace
io.write_outputs(pl.DataFrame({{"a": [2]}}), pl.DataFrame({{"r": ["new"]}}), io.Path({str(output)!r}))
"""], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert pl.read_parquet(output)["a"].to_list() == [2]
    assert pl.read_parquet(rejects_path(output))["r"].to_list() == ["old"]  # a reader that ignored the journal
    assert read_frame(output, {"a": pl.Int64}, "test")["a"].to_list() == [2]
    assert pl.read_parquet(rejects_path(output))["r"].to_list() == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.parquet", "out.rejects.parquet"]  # no journal, no temp


WRITER = """
import sys
import polars as pl
from tasks.core.io import read_frame, write_outputs
output, writer = sys.argv[1], int(sys.argv[2])
for round in range(25):
    rows = 20_000 + 1_000 * writer + round  # a different size each time: a torn or mixed file does not pass as whole
    write_outputs(pl.DataFrame({"writer": [writer] * rows}), pl.DataFrame({"writer": [writer] * rows}), output)
    read_frame(output, {"writer": pl.Int64}, "test")  # a reader between the writers: completes or waits, never tears
"""


def test_runs_writing_one_output_at_once_leave_one_runs_output_beside_the_same_runs_rejects(tmp_path):
    """Four processes each publish an output and its rejects 25 times into one path, reading between: every
    publication is whole (no run fails on another's temporary), and what is left is one run's output beside that same
    run's rejects, with no temporary or journal."""
    output = tmp_path / "out.parquet"
    runs = [subprocess.Popen([sys.executable, "-c", WRITER, str(output), str(w)], cwd=ROOT, stderr=subprocess.PIPE,
                             text=True) for w in range(4)]
    for run in runs:
        assert run.wait(timeout=300) == 0, run.stderr.read()
    kept, rejects = pl.read_parquet(output), pl.read_parquet(rejects_path(output))
    assert kept.height == rejects.height and kept["writer"].n_unique() == 1
    assert kept["writer"].to_list() == rejects["writer"].to_list()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.parquet", "out.rejects.parquet"]
