"""Every JSON file the project writes is strict JSON (`tasks.core.writing.json_text`): a float that is not finite is
null, never the `NaN` or `Infinity` that Python writes by default and no other parser reads."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tasks.core.writing import finite, json_text, write_json


def strict(text: str):
    """`text` parsed as RFC 8259 JSON: a `NaN`, `Infinity` or `-Infinity` token fails."""
    def refuse(token: str):
        raise AssertionError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


NUMBERS = {"nan": math.nan, "inf": math.inf, "ninf": -math.inf, "fine": 0.25, "nested": [(1.5, math.nan)],
           "deep": {"x": [{"y": math.inf}]}}
EXPECTED = {"nan": None, "inf": None, "ninf": None, "fine": 0.25, "nested": [[1.5, None]], "deep": {"x": [{"y": None}]}}


def test_a_float_that_is_not_finite_is_null():
    assert finite(NUMBERS) == EXPECTED and strict(json_text(NUMBERS)) == EXPECTED
    assert json_text({"a": 1}, indent=1) == json.dumps({"a": 1}, indent=1)  # finite data: Python's own bytes


def label_studio_tasks(path: Path) -> None:
    from tasks.validation.labelstudio import tasks_json

    path.write_bytes(tasks_json([{"data": NUMBERS}]))


def sample_record(path: Path) -> None:
    from tasks.image.records import PairRecords

    PairRecords(path.parent).append("ab" * 16, {"k": NUMBERS})
    record = next(path.parent.rglob("*.jsonl"))
    path.write_text(record.read_text().strip().splitlines()[-1])


def gallery_data(path: Path) -> None:
    from tasks.release.gallery_site import write_site

    write_site(path.parent / "site", {**NUMBERS, "pairs": [], "removal": []}, [])
    path.write_text((path.parent / "site/data.js").read_text().removeprefix("window.GALLERY = ").rstrip(";\n"))


@pytest.mark.parametrize("write", [lambda path: write_json(NUMBERS, path), label_studio_tasks, sample_record,
                                   gallery_data], ids=["metrics", "label-studio-tasks", "sample-record", "gallery"])
def test_each_writer_writes_strict_json(tmp_path, write):
    write(tmp_path / "out.json")
    text = (tmp_path / "out.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    strict(text)
