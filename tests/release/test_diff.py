"""Dataset diff: disjoint categories by caption_id, metric deltas, examples, Markdown/HTML rendering and escaping."""

from __future__ import annotations

import html.parser
import json
import re

import numpy as np
import polars as pl
import pytest

from tasks.core import schemas
from tasks.image import store
from tasks.release import diff

EVIL = "A <script>alert(1)</script> & a | pipe"


def counterfactuals(rows: dict[str, tuple[str, str, str]]) -> pl.DataFrame:
    """caption_id -> (caption, original word, substitute)."""
    return pl.DataFrame([{**dict.fromkeys(schemas.COUNTERFACTUALS), "caption_id": cid, "caption": caption,
                          "counterfactual": caption.replace(word, sub, 1), "original_word": word, "substitute": sub}
                         for cid, (caption, word, sub) in rows.items()], schema=schemas.COUNTERFACTUALS)


def pixel_paths(label: str) -> tuple[str, str]:
    pixels = np.frombuffer(label.encode().ljust(12, b"\0")[:12], np.uint8).reshape(2, 2, 3)
    return store.image_path(pixels), store.image_path(255 - pixels)


def selected(cf: pl.DataFrame, images: dict[str, str], clip_dir: float = 0.3) -> pl.DataFrame:
    """One selected pair per caption_id in `images` (id -> a label fixing its pixels), texts of `cf`; image paths are
    the store's, so pairs with equal labels share paths and others differ."""
    texts = {row["caption_id"]: row for row in cf.iter_rows(named=True)}
    return pl.DataFrame([{**dict.fromkeys(schemas.SELECTED), "caption_id": cid, "caption": texts[cid]["caption"],
                          "counterfactual": texts[cid]["counterfactual"], "clip_dir": clip_dir, "tried": 1,
                          **dict(zip(["image_o", "image_c"], pixel_paths(key)))}
                         for cid, key in images.items()], schema=schemas.SELECTED)


BASE = {"p1": ("A dog on a sofa.", "dog", "cat"), "p2": ("A man on a horse.", "horse", "bike"),
        "p3": ("A bowl of fruit.", "bowl", "plate"), "p4": ("A boat at sea.", "boat", "ship"),
        "p5": ("A cup of tea.", "cup", "pot")}
METRICS_A = {"funnel": {"final": 4}, "means": {"similarity": 0.8, "perplexity": None},
             "stages": {"selection": {"rows_in": 3, "done": True}}, "old_counter": 1}
METRICS_B = {"funnel": {"final": 4}, "means": {"similarity": 0.85, "perplexity": 12.5},
             "stages": {"selection": {"rows_in": 5, "done": False}}, "new_counter": 2.5}


@pytest.fixture
def versions() -> tuple[diff.Version, diff.Version]:
    """b vs a: p6 added, p5 removed, p3's substitute changed; pairs: p6 added, p4 dropped, p3 re-captioned (and
    re-imaged), p2 re-imaged only, p1 unchanged."""
    cf_a = counterfactuals(BASE)
    cf_b = counterfactuals({**{k: v for k, v in BASE.items() if k != "p5"}, "p3": ("A bowl of fruit.", "bowl", "box"),
                            "p6": (EVIL, "pipe", "tube")})
    a = diff.Version(cf_a, selected(cf_a, {"p1": "k1", "p2": "k2", "p3": "k3", "p4": "k4"}), METRICS_A)
    b = diff.Version(cf_b, selected(cf_b, {"p1": "k1", "p2": "k2new", "p3": "k3new", "p6": "k6"}, 0.4), METRICS_B)
    return a, b


def test_counts_per_category(versions):
    d = diff.diff_versions(*versions)
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert d["counterfactuals"] == {"a": 5, "b": 5, "added": 1, "removed": 1, "changed": 1, "unchanged": 3}
    assert d["pairs"] == {"a": 4, "b": 4, "added": 1, "removed": 1, "caption_changed": 1, "image_changed": 1,
                          "unchanged": 1}
    ids = {key: [row["caption_id"] for row in rows] for key, rows in d["examples"].items()}
    assert ids == {"counterfactuals.added": ["p6"], "counterfactuals.removed": ["p5"],
                   "counterfactuals.changed": ["p3"], "pairs.added": ["p6"], "pairs.removed": ["p4"],
                   "pairs.caption_changed": ["p3"], "pairs.image_changed": ["p2"]}


def test_a_version_against_itself_is_unchanged(versions):
    d = diff.diff_versions(versions[0], tuple(versions[0]))  # a plain tuple is a version too
    assert d["pairs"]["unchanged"] == 4 and d["counterfactuals"]["unchanged"] == 5
    assert all(not rows for rows in d["examples"].values())
    assert {m["delta"] for m in d["metrics"]} == {0}


def test_metric_deltas_cover_numeric_leaves_present_in_both(versions):
    d = diff.diff_versions(*versions)
    assert d["metrics"] == [
        {"metric": "funnel.final", "a": 4, "b": 4, "delta": 0, "rounding": False},
        {"metric": "means.similarity", "a": 0.8, "b": 0.85, "delta": 0.05, "rounding": False},
        {"metric": "stages.selection.rows_in", "a": 3, "b": 5, "delta": 2, "rounding": False}]
    assert d["metrics_only_a"] == ["old_counter"]
    assert d["metrics_only_b"] == ["means.perplexity", "new_counter"]  # None in a is not a number


def test_a_metric_moved_by_float_rounding_alone_is_shown_as_that(versions):
    """Another machine's kernels move float32 scores in their last bits: the diff lists such metrics apart, with
    both values in full, and not among the changes (a move of 1e-4 of its size is a change)."""
    a, b = versions
    means = {"similarity": 0.527979, "clip_dir": 0.5, "rows": 10}
    moved = {"similarity": 0.527975, "clip_dir": 0.50005, "rows": 10}
    d = diff.diff_versions(a._replace(metrics={"means": means}), b._replace(metrics={"means": moved}))
    assert [(m["metric"], m["rounding"]) for m in d["metrics"]] == [
        ("means.clip_dir", False), ("means.rows", False), ("means.similarity", True)]
    md = diff.to_markdown(d, "here", "there")
    changes, rounding = md.split("Metrics moved by float rounding only")
    assert "means.clip_dir" in changes and "means.similarity" not in changes
    assert "| means.similarity | 0.527979 | 0.527975 |" in rounding and "1 of 3 shared metrics unchanged" in md


def test_examples_show_both_sides(versions):
    d = diff.diff_versions(*versions)
    [changed] = d["examples"]["pairs.caption_changed"]
    assert changed == {"caption_id": "p3", "caption": "A bowl of fruit.", "counterfactual_a": "A plate of fruit.",
                       "counterfactual_b": "A box of fruit.", "substitute_a": "plate", "substitute_b": "box",
                       "clip_dir_a": 0.3, "clip_dir_b": 0.4}
    [removed] = d["examples"]["counterfactuals.removed"]
    assert (removed["counterfactual_a"], removed["counterfactual_b"], removed["substitute_b"]) == (
        "A pot of tea.", None, None)


def test_examples_are_capped(versions):
    a, b = versions
    grown = b._replace(counterfactuals=pl.concat([b.counterfactuals, counterfactuals(
        {f"q{i}": ("A cat.", "cat", "dog") for i in range(5)})]))
    d = diff.diff_versions(a, grown, max_examples=2)
    assert d["counterfactuals"]["added"] == 6
    assert [r["caption_id"] for r in d["examples"]["counterfactuals.added"]] == ["p6", "q0"]
    assert "First 2 by caption_id." in diff.to_markdown(d, "a", "b")


def test_duplicate_caption_ids_are_refused(versions):
    a, b = versions
    with pytest.raises(ValueError, match="b.selected"):
        diff.diff_versions(a, b._replace(selected=pl.concat([b.selected, b.selected.head(1)])))


def test_markdown_lists_counts_changed_metrics_and_escapes(versions):
    md = diff.to_markdown(diff.diff_versions(*versions), "HEAD~1", "exp <x>")
    assert md.startswith("# Dataset diff: HEAD~1 → exp &lt;x&gt;\n")
    assert "| selected pairs | 4 | 4 | 1 | 1 | 2 (1 caption, 1 image) | 1 |" in md
    assert "| means.similarity | 0.8 | 0.85 | +0.05 |" in md
    assert "funnel.final" not in md and "1 of 3 shared metrics unchanged." in md
    assert "| p3 | A bowl of fruit. | A plate of fruit. | A box of fruit. | plate → box | 0.3 → 0.4 |" in md
    assert "<script>" not in md
    assert "A &lt;script&gt;alert(1)&lt;/script&gt; &amp; a \\| pipe" in md
    rows = [line for line in md.splitlines() if "pipe" in line]
    assert len(rows) == 2 and all(len(re.split(r"(?<!\\)\|", row)) == 6 + 2 for row in rows)  # cells intact


class Cells(html.parser.HTMLParser):
    """Text of every <td>, and every tag seen."""

    def __init__(self):
        super().__init__()
        self.cells, self.tags, self._in_cell = [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_cell = tag == "td"
        if self._in_cell:
            self.cells.append("")

    def handle_endtag(self, tag):
        self._in_cell = self._in_cell and tag != "td"

    def handle_data(self, data):
        if self._in_cell:
            self.cells[-1] += data


def test_html_is_self_contained_and_escaped(versions):
    page = diff.to_html(diff.diff_versions(*versions), "a <i>", "b")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "&lt;script&gt;" in page
    parser = Cells()
    parser.feed(page)
    assert "script" not in parser.tags and "i" not in parser.tags
    assert not {"link", "img", "iframe"} & set(parser.tags)  # nothing fetched from outside
    assert EVIL in parser.cells  # the caption comes back intact once unescaped
    assert "2 (1 caption, 1 image)" in parser.cells
