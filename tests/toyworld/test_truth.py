"""Truth of a pair and of a run: judged on rendered scenes, summed into the metrics of truth.json."""

from __future__ import annotations

import polars as pl
import pytest

from tasks.toyworld import truth, world

CIRCLE, SQUARE = world.Obj("circle", "red", "small", 0.5, 0.25), world.Obj("square", "blue", "large", 0.5, 0.72)
C_O = "A red circle above a large blue square."


@pytest.mark.parametrize(("counterfactual", "scene_c", "expected"), [
    ("A red triangle above a large blue square.", (world.Obj("triangle", "red", "small", 0.5, 0.25), SQUARE),
     (True, True)),
    ("A red triangle above a large blue square.", (world.Obj("triangle", "red", "small", 0.3, 0.2), SQUARE),
     (True, False)),  # the edited object moved: P2P should have kept its place
    ("A red triangle above a large blue square.", (CIRCLE, SQUARE), (False, False)),  # I_c ignores C_c
    ("A red circle.", (CIRCLE,), (True, True)),  # a deleted phrase: the first object stays
    ("A red triangle triangle above a large blue square.", (CIRCLE, SQUARE), (False, False)),  # no world caption
    ("A large blue square above a red circle.", (world.Obj("square", "blue", "large", 0.5, 0.28),
                                                 world.Obj("circle", "red", "small", 0.5, 0.75)), (True, True)),
    # the phrases swapped: each place now shows the other object, the layout kept (what P2P should give)
])
def test_a_pair_is_accurate_when_both_images_show_their_caption(counterfactual, scene_c, expected):
    assert truth.judge_pair(world.render((CIRCLE, SQUARE), 32), world.render(scene_c, 32), C_O,
                            counterfactual) == expected


def frame(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=truth.TRUTH, orient="row")


def test_metrics_sum_the_run():
    samples = frame([("a", 0, "noun", True, True, True, False), ("a", 1, "noun", False, False, True, True),
                     ("b", 0, "swap", False, False, False, False), ("b", 1, "swap", True, False, True, False)])
    selected = pl.DataFrame([("a", "noun", True, True), ("b", "swap", True, False)], schema=truth.SELECTED_TRUTH,
                            orient="row")
    subjects = pl.DataFrame({"caption_id": ["a", "a", "b", "b"], "sample": [0, 1, 0, 1],
                             "subjects_pass": [True, False, False, False]})
    judged = pl.DataFrame({"caption_id": ["a", "b"], "judge_pass": [True, False]})
    m = truth.metrics(samples, selected, subjects, judged)
    assert m["pair_accuracy"] == {"samples": 0.5, "selected": 1.0} and m["filter_lift"] == 2.0
    assert m["minimality"] == {"samples": 0.5, "selected": 0.5}
    assert m["p2p_gain"] == round(0.5 - 1 / 3, 4)  # with sharing 1 of 2 accurate samples, without 1 of 3
    assert m["by_edit_type"]["noun"]["pair_accuracy"] == {"samples": 0.5, "selected": 1.0}
    assert m["by_edit_type"]["swap"]["minimality"]["selected"] == 0.0
    assert m["both_subjects_check"] == {"rows": 4, "lift": 2.0, "accuracy": 0.75, "kappa": 0.5}
    assert m["judge"] == {"rows": 2, "lift": 1.0, "accuracy": 0.5, "kappa": 0.0}  # truth constant: no agreement
