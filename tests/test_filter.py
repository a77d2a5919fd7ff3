"""Selection over the score table: inclusive thresholds, best clip_dir with index tie-break, pair rejects."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from tasks import filter as clip_filter
from tasks import generate
from tasks.params import FilterParams

pytest_plugins = ["tests.image_fixtures"]

GOOD = {"sim_text_image_o": 0.3, "sim_text_image_c": 0.3, "sim_image_image": 0.8, "clip_dir": 0.3}
PARAMS = FilterParams()


def table(rows: list[dict]) -> pl.DataFrame:
    """A score table from partial rows (defaults: pair p0, passing scores, not rejected, images stored)."""
    full = [{"caption_id": "p0", "image_id": "i", "caption": "c", "counterfactual": "d", "sample": i, **GOOD,
             "reject_reason": None, "image_o": "o.png", "image_c": "c.png", **row} for i, row in enumerate(rows)]
    return pl.DataFrame(full, schema={name: generate.SCHEMA[name] for name in full[0]})


@pytest.mark.parametrize("column", list(GOOD))
def test_each_threshold_is_inclusive(column):
    minimum = clip_filter.thresholds(PARAMS)[column]
    scores = table([{column: minimum}, {column: float(np.nextafter(minimum, -1.0)), "caption_id": "p1"}])
    selected, rejects = clip_filter.run(scores, PARAMS)
    assert selected["caption_id"].to_list() == ["p0"]
    assert rejects.select("caption_id", "reason").rows() == [("p1", "no_sample_passed")]


def test_highest_clip_dir_wins_and_ties_go_to_the_lower_sample():
    scores = table([{"clip_dir": 0.5}, {"clip_dir": 0.9, "sim_image_image": 0.6},  # best dir but fails sim_ii
                    {"clip_dir": 0.7}, {"clip_dir": 0.7}, {"clip_dir": 0.4}])
    scores = scores.sample(fraction=1.0, shuffle=True, seed=3)  # input order must not matter
    selected, _ = clip_filter.run(scores, PARAMS)
    assert selected["sample"].to_list() == [2]


def test_nan_null_and_rejected_samples_never_pass():
    scores = table([{"clip_dir": math.nan}, {"sim_text_image_o": None}, {"reject_reason": "nan_image"},
                    {"caption_id": "p1", "reject_reason": "black_image", **dict.fromkeys(GOOD)}])
    selected, rejects = clip_filter.run(scores, FilterParams(min_text_image_o=-1, min_text_image_c=-1,
                                                             min_image_image=-1, min_clip_dir=-1))
    assert selected.height == 0
    assert rejects.select("caption_id", "n_samples", "stage", "reason").rows() == [
        ("p0", 3, "filter", "no_sample_passed"), ("p1", 1, "filter", "all_samples_rejected")]


def test_unstored_winners_are_flagged_for_regeneration():
    scores = table([{"clip_dir": 0.9, "image_o": None, "image_c": None}, {"clip_dir": 0.5, "caption_id": "p1"}])
    selected, _ = clip_filter.run(scores, PARAMS)
    assert selected.select("caption_id", "needs_regeneration").rows() == [("p0", True), ("p1", False)]


def test_refiltering_a_generated_table_needs_no_generation(generated, monkeypatch):
    scores, _ = generated

    def forbidden(*args, **kwargs):
        raise AssertionError("filtering must not generate")
    monkeypatch.setattr(generate, "render", forbidden)
    monkeypatch.setattr(generate, "load_models", forbidden)
    loose = FilterParams(min_text_image_o=-1, min_text_image_c=-1, min_image_image=-1, min_clip_dir=-1)
    selected, rejects = clip_filter.run(scores, loose)
    assert selected.height == 2 and rejects.height == 0
    best = scores.sort("clip_dir", descending=True).group_by("caption_id", maintain_order=True).first()
    assert sorted(selected.select("caption_id", "sample").rows()) == sorted(best.select("caption_id", "sample").rows())
    strict = FilterParams(**{**loose.model_dump(), "min_clip_dir": selected["clip_dir"].max()})
    selected_strict, rejects_strict = clip_filter.run(scores, strict)
    assert selected_strict.height == 1 and rejects_strict.height == 1
