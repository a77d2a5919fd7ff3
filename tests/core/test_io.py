"""Stage file I/O: an output may never be its own input, however the two paths are spelled; outputs are checked
writable before any work; an output and its rejects are replaced together or not at all (a run killed between their
renames is completed by the next reader)."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tasks.core.errors import UserError
from tasks.core.images import UnreadableImage, read_rgb
from tasks.core.io import (
    SameFileError,
    SchemaError,
    check_distinct,
    check_input,
    check_outputs,
    check_source,
    read_frame,
    rejects_path,
    write_outputs,
)
from tasks.core.schemas import CAPTIONS
from tasks.core.writing import OutputError
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


@pytest.mark.parametrize(("source", "output", "metrics", "clash"), [
    ("in.parquet", "out.parquet", "in.parquet", "in.parquet"),  # metrics over the input
    ("in.rejects.parquet", "in.parquet", None, "in.rejects.parquet"),  # the output's rejects over the input
    ("in.parquet", "out.parquet", "out.rejects.parquet", "out.rejects.parquet"),  # metrics over the rejects
    ("in.parquet", "out.parquet", "./out.parquet", "out.parquet"),  # metrics over the output
])
def test_check_distinct_refuses_any_written_file_that_is_read_or_written_again(tmp_path, monkeypatch, source, output,
                                                                                metrics, clash):
    """Every file a stage writes (output, its rejects, metrics) is none of the others and not its input."""
    monkeypatch.chdir(tmp_path)
    Path(source).write_text("x")
    with pytest.raises(SameFileError, match=clash.removeprefix("./")) as err:
        check_distinct(Path(source), Path(output), metrics and Path(metrics))
    assert "\n" not in str(err.value) and Path(source).read_text() == "x"


def test_check_outputs_refuses_a_device_or_fifo_it_would_replace(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path / "fifo", Path("/dev/null")):
        with pytest.raises(OutputError, match="not a regular file"):
            check_outputs(path)
    assert Path("/dev/null").is_char_device() and (tmp_path / "fifo").is_fifo()


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


def sites_file(tmp_path: Path, **columns) -> Path:
    """Two well-formed rows of `cfgen sites` output, with `columns` replacing whole columns."""
    from tasks.core.schemas import SITES

    rows = {"caption_id": ["a_0", "b_0"], "image_id": ["a", "b"], "caption": ["A dog.", "A red cat."],
            "edit_type": ["noun", "lexical"], "position": [1, 1], "start": [2, 2], "end": [5, 5],
            "original_word": ["dog", "red"], "tag": ["NN", "JJ"], "n_tokens": [3, 4]}
    path = tmp_path / "sites.parquet"
    pl.DataFrame({**rows, **columns}).select(list(SITES)).write_parquet(path)
    return path


def test_read_frame_takes_what_a_stage_wrote_and_lossless_relatives(tmp_path):
    from tasks.core.schemas import SITES

    frame = read_frame(sites_file(tmp_path, caption=pl.Series(["A dog.", "A red cat."], dtype=pl.Categorical),
                                  position=pl.Series([1, 1], dtype=pl.Int8)), SITES, "sites")
    assert frame.schema == pl.Schema(SITES) and frame["caption"].to_list() == ["A dog.", "A red cat."]


@pytest.mark.parametrize(("columns", "message"), [
    ({"caption": [0, 1]}, "column caption is Int64, expected String"),
    ({"caption": [{"t": "A dog."}, {"t": "x"}]}, "column caption is Struct"),
    ({"caption": [["A dog."], ["x"]]}, "column caption is List"),
    ({"position": [1.0, 2.5]}, "column position is Float64, expected Int64"),
    ({"position": pl.Series([1, 2**63], dtype=pl.UInt64)}, "out of their columns' range"),
    ({"caption": ["A dog.", None]}, r"1 row\(s\) break `null caption` \(first: row 1\)"),
    ({"caption_id": [None, "b_0"]}, r"break `null caption_id` \(first: row 0\)"),
    ({"edit_type": ["noun", "bogus"]}, "break `edit_type in"),
    ({"start": [9999, 2], "end": [10005, 5]}, "break `0 <= start <= end <= len"),
    ({"start": [5, 2], "end": [2, 5]}, "break `0 <= start <= end <= len"),
    ({"position": [-1, 1]}, "break `position >= 0`"),
    ({"position": [1, 500]}, r"break `position < n_tokens` \(first: row 1\)"),
])
def test_read_frame_refuses_a_file_no_stage_wrote_in_one_line(tmp_path, columns, message):
    """A wrong type, a null where no stage writes one, a value outside its domain: one line naming the file and the
    stage whose output it should be, before any row reaches stage logic (which would crash or keep garbage)."""
    from tasks.core.schemas import SITES

    with pytest.raises(SchemaError, match=message) as error:
        read_frame(sites_file(tmp_path, **columns), SITES, "sites")
    assert "\n" not in str(error.value) and "`cfgen sites`" in str(error.value)


@pytest.mark.parametrize(("p2p_fraction", "guidance_scale", "seed"), [
    (7.0, 7.5, 1), (float("nan"), 7.5, 1), (0.5, float("inf"), 1), (0.5, 7.5, -3)])
def test_read_frame_refuses_sample_plans_out_of_domain(tmp_path, p2p_fraction, guidance_scale, seed):
    from tasks.core.schemas import SAMPLES

    row = {c: None for c in SAMPLES} | {"caption_id": "a_0", "image_id": "a", "caption": "A dog.",
                                        "counterfactual": "A cat.", "edit_type": "noun", "original_word": "dog",
                                        "substitute": "cat", "sample": 0, "seed": seed, "p2p_fraction": p2p_fraction,
                                        "guidance_scale": guidance_scale}
    pl.DataFrame([row], schema=SAMPLES).write_parquet(tmp_path / "s.parquet")
    with pytest.raises(SchemaError, match="break `"):
        read_frame(tmp_path / "s.parquet", SAMPLES, "generate")


def test_read_rgb_refuses_what_it_cannot_decode_whole_with_a_reason(tmp_path, monkeypatch):
    """Truncated, empty, not an image: `image_unreadable`; over Pillow's pixel limit (a decompression bomb; under and
    over twice it, where Pillow itself refuses): `image_too_large`, decided from the header alone."""
    import numpy as np
    from PIL import Image

    Image.fromarray(np.full((20, 30, 3), 7, np.uint8)).save(tmp_path / "good.png")
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8)).save(tmp_path / "full.jpg")
    (tmp_path / "cut.jpg").write_bytes((tmp_path / "full.jpg").read_bytes()[:800])
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "text.png").write_text("not an image")
    assert read_rgb(tmp_path / "good.png").shape == (20, 30, 3)
    for name in ("cut.jpg", "empty.png", "text.png"):
        with pytest.raises(UnreadableImage) as error:
            read_rgb(tmp_path / name)
        assert error.value.reason == "image_unreadable" and "\n" not in str(error.value)
    for limit in (500, 200):  # 600 pixels: over the limit, then over twice it
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
        with pytest.raises(UnreadableImage) as error:
            read_rgb(tmp_path / "good.png")
        assert error.value.reason == "image_too_large"


@pytest.mark.parametrize("make, why", [(lambda p: None, "does not exist: run `cfgen ingest` first"),
                                       (Path.mkdir, "is a directory: expected the parquet output of `cfgen ingest`"),
                                       (os.mkfifo, "is no regular file (a device, FIFO or socket): expected")])
def test_an_input_or_caption_file_that_is_no_file_says_what_it_is(tmp_path, make, why):
    """A folder or FIFO given as a stage's input or caption file was said not to exist: the line says what it is
    (and reading a FIFO would wait forever)."""
    make(tmp_path / "given")
    with pytest.raises(SchemaError, match=f"^input {tmp_path / 'given'} {re.escape(why)}"):
        check_input(tmp_path / "given", CAPTIONS, "ingest")
    with pytest.raises(UserError, match=f"^caption file {tmp_path / 'given'} {re.escape(why.split(':')[0])}$"):
        check_source(tmp_path / "given")
