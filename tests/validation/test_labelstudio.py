"""Label Studio tasks and export reading: one task per image, seeded order and overlap, exact round trip of choices,
one-line errors for files that are not an export."""

from __future__ import annotations

import base64
import io
import json
import xml.etree.ElementTree as ET

import numpy as np
import polars as pl
import pytest
from PIL import Image

from tasks.core.errors import UserError
from tasks.core.schemas import SELECTED
from tasks.validation import labelstudio as ls
from tasks.validation.labelstudio import ExportError

ANNOTATORS = ("ann1", "ann2", "ann3", "ann4")
PREFIX = "https://example.org/images/"


def selected(n: int) -> pl.DataFrame:
    """n selected pairs: C_o "a photo of a dog i", C_c "... cat i", images `o/i.png`, `c/i.png`."""
    rows = [{"caption_id": f"{i:05d}", "image_id": f"img{i}", "caption": f"a photo of a dog {i}",
             "counterfactual": f"a photo of a cat {i}", "image_o": f"o/{i}.png", "image_c": f"c/{i}.png"}
            for i in range(n)]
    return pl.DataFrame([{**dict.fromkeys(SELECTED), **row} for row in rows], schema=SELECTED)


def write_pngs(frame: pl.DataFrame, folder) -> None:
    """A random 32x32 RGB PNG at every image path of `frame`."""
    rng = np.random.default_rng(0)
    for relative in frame["image_o"].to_list() + frame["image_c"].to_list():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / relative)


def build(frame: pl.DataFrame, seed: int = 0, **kwargs) -> list[dict]:
    return ls.build_tasks(frame, None, annotators=ANNOTATORS, seed=seed, url_prefix=PREFIX, **kwargs)


def test_label_config_is_one_required_single_choice_over_an_image_and_two_captions():
    view = ET.fromstring(ls.LABEL_CONFIG)
    assert view.find("Image").get("value") == "$image"
    assert [t.get("value") for t in view.iter("Text")] == ["$caption_a", "$caption_b"]
    (choices,) = view.iter("Choices")
    assert (choices.get("choice"), choices.get("required"), choices.get("toName")) == ("single", "true", "image")
    assert [c.get("value") for c in choices] == ["caption A", "caption B", "both", "neither"]


def test_one_task_per_image_with_its_own_caption_recorded():
    tasks = build(selected(50))
    assert len(tasks) == 100
    assert [(t["data"]["caption_id"], t["data"]["side"]) for t in tasks] == ls.image_keys(selected(50)).rows()
    for task in tasks:
        data = task["data"]
        own = data["caption_a"] if data["own"] == "A" else data["caption_b"]
        other = data["caption_b"] if data["own"] == "A" else data["caption_a"]
        i = int(data["caption_id"])
        assert (own, other) == ((f"a photo of a dog {i}", f"a photo of a cat {i}") if data["side"] == "o"
                                else (f"a photo of a cat {i}", f"a photo of a dog {i}"))
        assert data["image"] == f"{PREFIX}{data['side']}/{i}.png"
    assert {t["data"]["own"] for t in tasks if t["data"]["side"] == "o"} == {"A", "B"}
    assert {t["data"]["own"] for t in tasks if t["data"]["side"] == "c"} == {"A", "B"}


def test_tasks_are_deterministic_per_image_and_depend_on_the_seed():
    full = selected(40)
    assert ls.tasks_json(build(full)) == ls.tasks_json(build(full.reverse()))
    subset = full.filter(pl.col("caption_id").is_in(["00003", "00017", "00031"]))
    assert [t for t in build(full) if t["data"]["caption_id"] in ("00003", "00017", "00031")] == build(subset)
    assert ls.tasks_json(build(full, seed=1)) != ls.tasks_json(build(full))


def assignees(tasks: list[dict]) -> list[list[str]]:
    return [t["data"]["annotators"].split(",") for t in tasks]


def test_a_seeded_tenth_of_images_go_to_three_distinct_annotators_the_rest_to_one():
    tasks = build(selected(2000))
    overlap = [names for names in assignees(tasks) if len(names) > 1]
    assert 0.085 < len(overlap) / len(tasks) < 0.115
    assert all(len(set(names)) == 3 for names in overlap)
    singles = [names[0] for names in assignees(tasks) if len(names) == 1]
    assert len(overlap) + len(singles) == len(tasks)
    assert {singles.count(name) for name in ANNOTATORS} <= set(range(800, 1000))  # ~900 each: balanced
    assert {len(names) for names in assignees(build(selected(200), overlap_share=0.0))} == {1}


def test_images_are_embedded_as_png_data_uris_without_a_prefix(tmp_path):
    frame = selected(2)
    write_pngs(frame, tmp_path)
    tasks = ls.build_tasks(frame, tmp_path, annotators=ANNOTATORS, seed=0)
    uri = tasks[0]["data"]["image"]
    assert uri.startswith("data:image/png;base64,")
    assert base64.b64decode(uri.split(",", 1)[1]) == (tmp_path / "o/0.png").read_bytes()
    assert Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).size == (32, 32)
    (tmp_path / "o/1.png").unlink()
    with pytest.raises(UserError, match="o/1.png does not exist"):
        ls.build_tasks(frame, tmp_path, annotators=ANNOTATORS, seed=0)
    with pytest.raises(UserError, match="no images folder"):
        ls.build_tasks(frame, None, annotators=ANNOTATORS, seed=0)


def test_the_overlap_set_needs_enough_annotators():
    with pytest.raises(UserError, match="3 distinct annotators"):
        ls.build_tasks(selected(1), None, annotators=["a", "b", "b"], seed=0, url_prefix=PREFIX)


def annotation(label: str | None, user, **extra) -> dict:
    result = [] if label is None else [{"from_name": "match", "to_name": "image", "type": "choices",
                                        "value": {"choices": [label]}}]
    return {"result": result, "completed_by": user, "was_cancelled": False, **extra}


def export_task(caption_id: str, side: str, own: str, *annotations: dict) -> dict:
    return {"id": 1, "data": {"caption_id": caption_id, "side": side, "own": own}, "annotations": list(annotations)}


def test_ratings_map_choices_back_to_the_image_and_drop_skipped_and_empty_annotations():
    export = [
        export_task("a", "o", "A", annotation("caption A", 1), annotation("caption B", {"id": 2, "email": "x@y"}),
                    annotation("both", 3), annotation("caption A", 4, was_cancelled=True), annotation(None, 5)),
        export_task("a", "c", "B", annotation("caption A", 1), annotation("caption B", 2),
                    annotation("neither", 1)),  # annotator 1 again: the last one counts
        {"id": 3, "data": {"caption_id": "b", "side": "o", "own": "B"}},  # not annotated yet
        export_task("b", "c", "B"),
    ]
    assert ls.ratings(export).rows() == [("a", "c", "1", "neither", 2), ("a", "c", "2", "own", 1),
                                         ("a", "o", "1", "own", 1), ("a", "o", "3", "both", 1),
                                         ("a", "o", "x@y", "other", 1)]
    assert ls.ratings([]).schema == ls.RATINGS


@pytest.mark.parametrize("first, second, counts", [
    pytest.param("2024-05-02T09:00:00.000000Z", "2024-05-01T09:00:00.000000Z", "caption A", id="first-updated-later"),
    pytest.param("2024-05-01T09:00:00.000000Z", "2024-05-02T09:00:00+00:00", "caption B", id="second-updated-later"),
    pytest.param("2024-05-01T11:00:00+02:00", "2024-05-01T10:00:00Z", "caption B", id="time-zones-compared"),
    pytest.param(None, None, "caption B", id="no-times-the-later-in-the-export"),
    pytest.param("2024-05-01T09:00:00Z", None, "caption A", id="no-time-is-the-oldest"),
])
def test_repeated_annotations_count_once_the_latest_by_updated_at(first, second, counts):
    """One annotator, one task, two annotations: the latest edited one counts, whatever the export order; the
    rating says there were two, so the validation results count the repeat."""
    export = [export_task("a", "o", "A", annotation("caption A", 1, id=10, updated_at=first),
                          annotation("caption B", 1, id=11, updated_at=second))]
    own = {"caption A": "own", "caption B": "other"}[counts]
    assert ls.ratings(export).rows() == [("a", "o", "1", own, 2)]


def test_an_annotation_time_that_is_not_one_is_a_one_line_error():
    export = [export_task("a", "o", "A", annotation("caption A", 1, updated_at="yesterday"))]
    with pytest.raises(ExportError, match="task 0 .*yesterday"):
        ls.ratings(export)


@pytest.mark.parametrize("content, message", [
    (b"{not json", "not a readable JSON file"),
    (b'{"tasks": []}', "expected a JSON list of tasks"),
    (json.dumps([{"id": 1}]).encode(), "task 0 lacks 'data'"),
    (json.dumps([export_task("a", "x", "A")]).encode(), "data.side='x'"),
    (json.dumps([export_task("a", "o", "A", annotation("a dog", 1))]).encode(), "choice 'a dog' is not in"),
    (json.dumps([export_task("a", "o", "A", annotation("both", None))]).encode(), "completed_by None"),
    (json.dumps([export_task("a", "o", "A", annotation("both\nneither", 1))]).encode(), "choice 'both\\\\nneither'"),
    (json.dumps([export_task("a", "o", "A", annotation("both", 1, was_cancelled="false"))]).encode(),
     "was_cancelled 'false' is not true or false"),
    (b"[" * 200_000 + b"]" * 200_000, r"not a readable JSON file \(RecursionError\)"),
])
def test_a_file_that_is_not_an_export_is_a_one_line_error(tmp_path, content, message):
    path = tmp_path / "export.json"
    path.write_bytes(content)
    with pytest.raises(ExportError, match=message) as err:
        ls.read_export(path)
    assert "\n" not in str(err.value)
    with pytest.raises(ExportError, match="export.json: not a readable"):
        ls.read_export(tmp_path / "missing" / "export.json")
