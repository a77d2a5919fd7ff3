"""Selection helpers over the screening table: inclusive thresholds, ranking, canonical failures, pair rejects."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from tasks.core.schemas import SAMPLES
from tasks.image import selection, thresholds
from tasks.image.params import SelectionParams

GOOD = {"sim_text_image_o": 0.3, "sim_text_image_c": 0.3, "sim_image_image": 0.8, "clip_dir": 0.3}
SUBJECTS = {"subject_margin_o": 0.05, "subject_margin_c": 0.05}
PARAMS = SelectionParams()


def table(rows: list[dict]) -> pl.DataFrame:
    """A screening table from partial rows (defaults: pair p0, passing scores, not rejected)."""
    full = [{"caption_id": "p0", "image_id": "i", "caption": "c", "counterfactual": "d", "edit_type": "noun",
             "original_word": "o", "substitute": "s", "sample": i, **GOOD, **SUBJECTS, "reject_reason": None, **row}
            for i, row in enumerate(rows)]
    return pl.DataFrame(full, schema={name: SAMPLES[name] for name in full[0]})


@pytest.mark.parametrize("column", list(GOOD))
def test_each_threshold_is_inclusive(column):
    minimum = PARAMS.thresholds()[column]
    scores = table([{column: minimum}, {column: float(np.nextafter(minimum, -1.0)), "caption_id": "p1"}])
    assert thresholds.ranked(scores, PARAMS)["caption_id"].to_list() == ["p0"]
    rejects = selection.unselected(scores, PARAMS, [], [])
    assert rejects.select("caption_id", "reason").rows() == [("p0", "no_sample_passed"), ("p1", "no_sample_passed")]


def test_ranking_is_best_clip_dir_first_with_ties_to_the_lower_sample():
    scores = table([{"clip_dir": 0.5}, {"clip_dir": 0.9, "sim_image_image": 0.6},  # best dir but fails sim_ii
                    {"clip_dir": 0.7}, {"clip_dir": 0.7}, {"clip_dir": 0.4}, {"caption_id": "p1", "clip_dir": 0.2}])
    ranked = thresholds.ranked(scores.sample(fraction=1.0, shuffle=True, seed=3), PARAMS)  # order must not matter
    assert ranked.select("caption_id", "sample", "rank").rows() == [
        ("p0", 2, 0), ("p0", 3, 1), ("p0", 0, 2), ("p0", 4, 3), ("p1", 5, 0)]


@pytest.mark.parametrize(("rank_by", "order"), [
    ("clip_dir", [0, 1, 2]),
    ("min_text_image", [2, 1, 0]),  # min(0.6, 0.25) < min(0.5, 0.4) < min(0.45, 0.45)
    ("subject_margin", [1, 2, 0]),
])
def test_the_ranking_key_is_a_param(rank_by, order):
    scores = table([{"clip_dir": 0.9, "sim_text_image_o": 0.6, "sim_text_image_c": 0.25, "subject_margin_o": 0.01},
                    {"clip_dir": 0.8, "sim_text_image_o": 0.5, "sim_text_image_c": 0.4, "subject_margin_c": 0.3},
                    {"clip_dir": 0.7, "sim_text_image_o": 0.45, "sim_text_image_c": 0.45, "subject_margin_o": 0.2}])
    params = PARAMS.model_copy(update={"rank_by": rank_by})
    assert thresholds.ranked(scores, params)["sample"].to_list() == order
    skipped = scores.with_columns(subject_margin_o=None, subject_margin_c=None, edit_type=pl.lit("lexical"))
    assert thresholds.ranked(skipped, PARAMS.model_copy(update={"rank_by": "subject_margin"}))["sample"].to_list() \
        == [0, 1, 2]  # an edit the both-subjects check skips ranks by clip_dir


def test_nan_null_and_rejected_samples_never_pass_and_pairs_get_their_reason():
    scores = table([{"clip_dir": math.nan}, {"sim_text_image_o": None}, {"reject_reason": "nan_image"},
                    {"caption_id": "p1", "reject_reason": "black_image", **dict.fromkeys(GOOD)},
                    {"caption_id": "p2"}, {"caption_id": "p3"}])
    loose = SelectionParams(min_text_image_o=-1, min_text_image_c=-1, min_image_image=-1, min_clip_dir=-1)
    assert thresholds.ranked(scores, loose)["caption_id"].to_list() == ["p2", "p3"]
    rejects = selection.unselected(scores, loose, selected_ids=["p2"], exhausted=["p3"])
    assert rejects.select("caption_id", "sample", "stage", "reason").rows() == [
        ("p0", None, "selection", "no_sample_passed"), ("p1", None, "selection", "all_samples_rejected"),
        ("p3", None, "selection", "no_canonical_render_passed")]


@pytest.mark.parametrize(("change", "reason"), [
    ({"nan": True}, "canonical_nan_image"), ({"max_pixel_c": 3}, "canonical_black_image"),
    ({"sim_image_image": 0.69}, "canonical_below_sim_image_image"),
    ({"clip_dir": math.nan}, "canonical_below_clip_dir"),
    ({"subject_margin_c": 0.0}, "canonical_original_subject_in_image_c"),
    ({"subject_margin_o": -0.1}, "canonical_substitute_in_image_o"),
    ({"subject_margin_o": None, "subject_margin_c": None}, None),  # no noun swapped: no subject check
    ({}, None)])
def test_a_canonical_render_fails_on_nan_black_or_any_threshold(change, reason):
    measured = {"nan": False, "max_pixel_o": 200, "max_pixel_c": 200, **GOOD, **SUBJECTS, **change}
    assert selection.failure(measured, PARAMS, black_threshold=4) == reason


@pytest.mark.parametrize("column", list(SUBJECTS))
def test_each_subject_margin_is_exclusive_and_null_passes(column):
    minimum = PARAMS.subject_margins()[column]
    scores = table([{column: float(np.nextafter(minimum, 1.0))}, {column: minimum, "caption_id": "p1"},
                    {column: None, "caption_id": "p2", "edit_type": "delete"}])
    assert thresholds.ranked(scores, PARAMS)["caption_id"].to_list() == ["p0", "p2"]


def test_a_pair_failing_only_the_subject_check_gets_the_reason_of_its_best_sample():
    scores = table([{"clip_dir": 0.9, "subject_margin_c": -0.2}, {"clip_dir": 0.5, "subject_margin_o": -0.2},
                    {"caption_id": "p1", "subject_margin_o": -0.1},
                    {"caption_id": "p2", "subject_margin_o": -0.1, "sim_image_image": 0.1},  # fails CLIP first
                    {"caption_id": "p3", "subject_margin_o": -0.1, "subject_margin_c": -0.1}])
    rejects = selection.unselected(scores, PARAMS, [], [])
    assert rejects.select("caption_id", "reason").rows() == [
        ("p0", "original_subject_in_image_c"), ("p1", "substitute_in_image_o"), ("p2", "no_sample_passed"),
        ("p3", "original_subject_in_image_c")]


def test_a_check_set_to_none_is_off():
    scores = table([{"subject_margin_c": -0.5}, {"caption_id": "p1", "subject_margin_o": -0.5}])
    off_c = PARAMS.model_copy(update={"min_subject_margin_c": None})
    assert thresholds.ranked(scores, off_c)["caption_id"].to_list() == ["p0"]
    off_both = off_c.model_copy(update={"min_subject_margin_o": None})
    assert thresholds.ranked(scores, off_both)["caption_id"].to_list() == ["p0", "p1"]
