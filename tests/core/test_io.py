"""Stage file I/O: an output may never be its own input, however the two paths are spelled."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.core.io import SameFileError, check_distinct


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
