"""Agreement results against hand computations: Fleiss' κ (Fleiss 1971 as worked on Wikipedia), Table 1, majority
labels and their tie rule, coverage and the human-validated subset, on a small hand-made Label Studio export."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tasks.core.errors import UserError
from tasks.validation import agreement as ag
from tasks.validation import labelstudio as ls
from tests.validation.test_labelstudio import annotation, export_task, selected

WIKIPEDIA_FLEISS = [  # 10 subjects x 5 categories, 14 raters each: P = 0.378, P_e = 0.213, kappa = 0.210
    [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
]


def test_fleiss_kappa_matches_the_worked_example():
    assert ag.fleiss_kappa(np.array(WIKIPEDIA_FLEISS)) == pytest.approx(0.20993, abs=1e-5)


def test_fleiss_kappa_edge_cases():
    assert ag.fleiss_kappa(np.array([[3, 0], [0, 3]])) == 1.0
    assert ag.fleiss_kappa(np.array([[3, 0], [3, 0]])) is None  # chance agreement 1: undefined
    assert ag.fleiss_kappa(np.zeros((0, 4))) is None
    with pytest.raises(ValueError, match="same number"):
        ag.fleiss_kappa(np.array([[3, 0], [1, 1]]))


def rated(caption_id: str, side: str, *labels: str) -> dict:
    """A task whose own caption is A, rated by annotators 1, 2, ... with `labels` ("A" = own, "B" = other)."""
    names = {"A": "caption A", "B": "caption B"}
    return export_task(caption_id, side, "A", *[annotation(names.get(label, label), user)
                                                 for user, label in enumerate(labels, 1)])


EXPORT = [
    rated("00001", "o", "A"), rated("00001", "c", "A"),                      # both own: validated
    rated("00002", "o", "A", "A", "B"), rated("00002", "c", "B", "neither", "both"),  # overlap; 1-1-1 tie -> other
    rated("00003", "o", "neither"), rated("00003", "c", "both"),
    rated("00004", "o", "A", "neither"), rated("00004", "c"),                  # 1-1 tie -> neither; I_c unrated
]
IMAGES = ls.image_keys(selected(5))  # pairs 00000 .. 00004: 00000 has no task in the export


def table(frame) -> dict:
    return {(row["images"], row["label"]): (row["count"], row["share"]) for row in frame.iter_rows(named=True)}


def test_table1_from_majority_labels_with_ties_to_the_least_favourable_choice():
    ratings = ls.ratings(EXPORT)
    labels = ag.image_labels(ratings)
    assert sorted(labels.rows()) == [("00001", "c", 1, "own"), ("00001", "o", 1, "own"), ("00002", "c", 3, "other"),
                                     ("00002", "o", 3, "own"), ("00003", "c", 1, "both"), ("00003", "o", 1, "neither"),
                                     ("00004", "o", 2, "neither")]
    assert table(ag.table1(labels)) == {
        ("I_o", "correct"): (2, 2 / 4), ("I_o", "incorrect"): (0, 0.0), ("I_o", "neither"): (2, 2 / 4),
        ("I_o", "both"): (0, 0.0), ("I_c", "correct"): (1, 1 / 3), ("I_c", "incorrect"): (1, 1 / 3),
        ("I_c", "neither"): (0, 0.0), ("I_c", "both"): (1, 1 / 3), ("all", "correct"): (3, 3 / 7),
        ("all", "incorrect"): (1, 1 / 7), ("all", "neither"): (2, 2 / 7), ("all", "both"): (1, 1 / 7)}
    assert ag.validated(labels) == ["00001"]


def test_an_empty_table1_has_counts_and_no_shares():
    assert set(table(ag.table1(ag.image_labels(ls.ratings([])))).values()) == {(0, None)}


def test_kappa_and_disagreements_on_the_images_with_three_ratings():
    ratings = ls.ratings(EXPORT)
    # own/other/both/neither counts [2, 1, 0, 0] and [0, 1, 1, 1]: P = 1/6, P_e = 10/36 -> kappa = -2/13
    assert ag.overlap_kappa(ratings) == pytest.approx(-2 / 13)
    assert ag.disagreements(ratings).rows() == [("1-1-1", "other+both+neither", 1), ("2-1", "own+own+other", 1)]
    assert ag.overlap_kappa(ratings, raters=2) == -1.0  # 00004/o alone: own vs neither, P = 0, P_e = 1/2


def test_coverage_counts_images_with_a_rating_and_rejects_foreign_ones():
    ratings = ls.ratings(EXPORT)
    assert ag.coverage(ratings, IMAGES) == {"images": 10, "rated": 7, "share": 0.7}
    with pytest.raises(UserError, match="2 rated images are not in the selection.*caption 00003 side c"):
        ag.coverage(ratings, IMAGES.filter(IMAGES["caption_id"] != "00003"))


def test_summary_is_plain_json():
    result = json.loads(json.dumps(ag.summary(ls.ratings(EXPORT), IMAGES)))
    assert (result["coverage"]["rated"], result["overlap_images"], result["validated_pairs"]) == (7, 2, 1)
    assert result["fleiss_kappa"] == pytest.approx(-2 / 13)
    assert len(result["table1"]) == 12
    assert result["duplicate_annotations"] == 0


def test_repeated_annotations_are_counted_and_the_latest_decides_validation():
    """Annotator 1 first rated 00001's I_c as its own caption, then changed it (a second annotation, edited later but
    exported first): the pair is not validated and the results say one annotation was set aside."""
    changed = annotation("caption B", 1, updated_at="2024-05-02T10:00:00Z")
    first = annotation("caption A", 1, updated_at="2024-05-01T10:00:00Z")
    export = [rated("00001", "o", "A"), export_task("00001", "c", "A", changed, first)]
    result = ag.summary(ls.ratings(export), IMAGES)
    assert (result["validated_pairs"], result["duplicate_annotations"]) == (0, 1)
    assert result["coverage"]["rated"] == 2
