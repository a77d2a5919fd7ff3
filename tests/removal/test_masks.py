"""Removal decisions on hand-made box layouts: each branch, each alpha exactly at its boundary, the mask rule."""

from __future__ import annotations

import random

import numpy as np
import polars as pl

from tasks.core import schemas
from tasks.removal import masks
from tasks.removal.masks import union_mask
from tasks.removal.params import RemovalMasksParams

PARAMS = RemovalMasksParams()  # alpha1 0.4, alpha2 0.8, alpha3 0.7
Layout = dict[str, dict[str, list[list[float]]]]  # image_id -> class -> boxes


def frames(layout: Layout, width: int = 10, height: int = 10) -> tuple[pl.DataFrame, pl.DataFrame]:
    images = pl.DataFrame([{"image_id": i, "file_name": f"{i}.jpg", "width": width, "height": height}
                           for i in layout])
    boxes = pl.DataFrame([{"image_id": i, "category": c, **dict(zip("xywh", map(float, box)))}
                          for i, classes in layout.items() for c, bs in classes.items() for box in bs],
                         schema={"image_id": pl.String, "category": pl.String, **dict.fromkeys("xywh", pl.Float64)})
    return images, boxes


def decide(layout: Layout, params: RemovalMasksParams = PARAMS, **size: int) -> tuple[pl.DataFrame, dict]:
    """(kept, {(image, class): decision or reject reason}), checking the schemas and the exactly-once invariant."""
    kept, rejects = masks.run(*frames(layout, **size), params)
    assert dict(kept.schema) == schemas.REMOVAL_MASKS
    assert dict(rejects.schema) == schemas.REMOVAL_MASKS_REJECTS
    assert set(rejects["stage"]) <= {"removal_masks"}
    pairs = list(zip(kept["image_id"], kept["category"], kept["decision"])) + list(
        zip(rejects["image_id"], rejects["category"], rejects["reason"]))
    outcome = {(i, c): d for i, c, d in pairs}
    assert len(outcome) == len(pairs)  # no (image, class) decided twice
    for image, classes in layout.items():
        expected = {(image, c) for c in classes} if len(classes) >= 2 else {(image, None)}
        assert {key for key in outcome if key[0] == image} == expected
    return kept, outcome


def row(kept: pl.DataFrame, image: str, category: str) -> dict:
    return kept.filter(image_id=image, category=category).row(0, named=True)


# --- union_mask -------------------------------------------------------------------------------------------------


def touched(box: list[float], width: int, height: int) -> np.ndarray:
    """The rule from first principles: pixel [c, c+1) x [r, r+1) meets the open box in a positive area."""
    x, y, w, h = box
    return np.array([[c < x + w and c + 1 > x and r < y + h and r + 1 > y for c in range(width)]
                     for r in range(height)])


def test_union_mask_integer_box_covers_exactly_its_pixels():
    mask = union_mask([[2, 3, 4, 2]], width=8, height=6)
    assert mask.shape == (6, 8) and mask.dtype == bool
    expected = np.zeros((6, 8), bool)
    expected[3:5, 2:6] = True
    assert (mask == expected).all()


def test_union_mask_fractional_edges_cover_the_whole_pixel():
    mask = union_mask([[1.5, 0.2, 2.0, 1.0]], width=6, height=4)  # columns 1..3, rows 0..1
    assert np.argwhere(mask).tolist() == [[r, c] for r in (0, 1) for c in (1, 2, 3)]
    assert union_mask([[2.0, 2.0, 0.5, 0.5]], 5, 5).sum() == 1  # inside one pixel: that pixel


def test_union_mask_clips_to_the_image():
    mask = union_mask([[-2.5, 8.5, 4, 4]], width=10, height=10)  # columns 0..1, rows 8..9
    assert np.argwhere(mask).tolist() == [[r, c] for r in (8, 9) for c in (0, 1)]
    assert not union_mask([[12, 0, 3, 3], [-5, -5, 2, 2], [0, 10, 4, 4], [-3, 0, 3, 5]], 10, 10).any()


def test_union_mask_is_the_union_and_matches_the_rule_on_random_boxes():
    rng = random.Random(0)
    for _ in range(200):
        width, height = rng.randint(1, 12), rng.randint(1, 12)
        boxes = [[rng.uniform(-4, 14), rng.uniform(-4, 14), rng.uniform(0.1, 8), rng.uniform(0.1, 8)]
                 for _ in range(rng.randint(1, 3))]
        expected = np.logical_or.reduce([touched(b, width, height) for b in boxes])
        assert (union_mask(boxes, width, height) == expected).all()
    assert not union_mask([], 3, 2).any() and union_mask([], 3, 2).shape == (2, 3)


# --- branches -----------------------------------------------------------------------------------------------------


def test_alone_removes_the_class_and_keeps_the_rest():
    kept, outcome = decide({"i": {"dog": [[0, 0, 3, 3]], "cat": [[5, 5, 3, 3], [0, 8, 1, 1]]}})
    assert outcome == {("i", "cat"): "alone", ("i", "dog"): "alone"}
    cat = row(kept, "i", "cat")
    assert cat == {"image_id": "i", "file_name": "i.jpg", "width": 10, "height": 10, "category": "cat",
                   "decision": "alone", "removed": ["cat"], "remaining": ["dog"],
                   "boxes": [[5.0, 5.0, 3.0, 3.0], [0.0, 8.0, 1.0, 1.0]], "area_share": 0.1}
    assert row(kept, "i", "dog")["area_share"] == 0.09


def test_with_overlapping_removes_every_class_it_covers():
    layout = {"i": {"person": [[0, 0, 6, 6]], "hat": [[1, 1, 3, 3]], "kite": [[8, 8, 2, 2]], "ball": [[5, 5, 2, 2]]}}
    kept, outcome = decide(layout)
    # person covers hat fully (1 > 0.8), ball by 1/4 and kite not at all; hat covers person by 9/36 = 0.25 < 0.4
    assert outcome == {("i", "ball"): "alone", ("i", "hat"): "alone", ("i", "kite"): "alone",
                       ("i", "person"): "with_overlapping"}
    person = row(kept, "i", "person")
    assert person["removed"] == ["hat", "person"] and person["remaining"] == ["ball", "kite"]
    assert person["boxes"] == [[1.0, 1.0, 3.0, 3.0], [0.0, 0.0, 6.0, 6.0]]  # by removed class name
    assert person["area_share"] == 0.36


def test_ambiguous_overlap_is_rejected():
    # dog covers 2 of the frisbee's 4 pixels: 0.5, neither < 0.4 nor > 0.8
    _, outcome = decide({"i": {"dog": [[0, 0, 5, 10]], "frisbee": [[3, 0, 4, 1]]}})
    assert outcome == {("i", "dog"): "ambiguous_overlap", ("i", "frisbee"): "alone"}


def test_mask_too_large_is_rejected():
    _, outcome = decide({"i": {"bed": [[0, 0, 8, 10]], "cat": [[9, 9, 1, 1]]}})
    assert outcome == {("i", "bed"): "mask_too_large", ("i", "cat"): "alone"}


def test_fewer_than_two_classes_is_one_reject_per_image():
    images, boxes = frames({"one": {"dog": [[0, 0, 2, 2], [5, 5, 2, 2]]}, "none": {}})
    kept, rejects = masks.run(images, boxes, PARAMS)
    assert kept.is_empty()
    assert rejects.rows() == [("none", "none.jpg", None, "removal_masks", "fewer_than_two_classes"),
                              ("one", "one.jpg", None, "removal_masks", "fewer_than_two_classes")]


def test_removing_every_class_is_rejected():
    _, outcome = decide({"i": {"dog": [[0, 0, 5, 5]], "cat": [[0, 0, 5, 5]]}})
    assert outcome == {("i", "cat"): "nothing_remains", ("i", "dog"): "nothing_remains"}


def test_the_same_removed_set_is_kept_once():
    kept, outcome = decide({"i": {"dog": [[0, 0, 5, 5]], "cat": [[0, 0, 5, 5]], "kite": [[7, 7, 2, 2]]}})
    assert outcome == {("i", "cat"): "with_overlapping", ("i", "dog"): "duplicate_removal", ("i", "kite"): "alone"}
    assert row(kept, "i", "cat")["removed"] == ["cat", "dog"]


def test_a_class_with_no_pixel_in_the_image_is_overlapped_by_nothing():
    _, outcome = decide({"i": {"dog": [[0, 0, 10, 10]], "ghost": [[20, 20, 2, 2]], "cat": [[0, 0, 2, 2]]}},
                        RemovalMasksParams(alpha3=1.0))
    assert outcome == {("i", "cat"): "alone", ("i", "dog"): "with_overlapping", ("i", "ghost"): "alone"}


# --- boundaries (integer boxes on a 10 x 10 grid: every ratio is exact) ---------------------------------------------


def test_overlap_exactly_alpha1_is_not_alone():
    line = [[0, 0, 10, 1]]  # 10 pixels; the dog covers 4 (0.4) or 3 (0.3) of them
    _, outcome = decide({"at": {"dog": [[0, 0, 4, 5]], "line": line}, "below": {"dog": [[0, 0, 3, 5]], "line": line}})
    assert outcome[("at", "dog")] == "ambiguous_overlap"
    assert outcome[("below", "dog")] == "alone"


def test_overlap_exactly_alpha2_does_not_pull_the_class_in():
    line, kite = [[0, 0, 10, 1]], [[0, 9, 1, 1]]  # the dog covers 8 (0.8) or 9 (0.9) of the line's 10 pixels
    kept, outcome = decide({"at": {"dog": [[0, 0, 8, 5]], "line": line, "kite": kite},
                            "above": {"dog": [[0, 0, 9, 5]], "line": line, "kite": kite}})
    assert outcome[("at", "dog")] == "ambiguous_overlap"
    assert outcome[("above", "dog")] == "with_overlapping"
    assert row(kept, "above", "dog")["removed"] == ["dog", "line"]


def test_area_share_exactly_alpha3_is_kept():
    cat = [[8, 0, 2, 2]]
    kept, outcome = decide({"at": {"bed": [[0, 0, 7, 10]], "cat": cat},
                            "above": {"bed": [[0, 0, 7, 10], [7, 0, 1, 1]], "cat": cat}})
    assert outcome[("at", "bed")] == "alone" and row(kept, "at", "bed")["area_share"] == 0.7
    assert outcome[("above", "bed")] == "mask_too_large"


def test_area_share_is_of_the_clipped_mask_over_width_times_height():
    kept, outcome = decide({"i": {"bed": [[0, 0, 14, 50]], "cat": [[18, 0, 2, 2]]}}, width=20, height=5)
    assert outcome[("i", "bed")] == "alone" and row(kept, "i", "bed")["area_share"] == 0.7


def test_changing_alpha1_changes_exactly_the_overlaps_between_old_and_new():
    # the dog covers k of the line's 20 pixels: overlap k / 20
    layout = {f"k{k}": {"dog": [[0, 0, k, 1]], "line": [[0, 0, 10, 2]], "kite": [[0, 9, 1, 1]]} for k in (5, 6, 7, 9)}
    kept_04, at_04 = decide(layout, RemovalMasksParams(alpha1=0.4))
    kept_03, at_03 = decide(layout, RemovalMasksParams(alpha1=0.3))
    changed = {key: (at_04[key], at_03[key]) for key in at_04 if at_04[key] != at_03[key]}
    assert set(at_04) == set(at_03)
    assert changed == {("k6", "dog"): ("alone", "ambiguous_overlap"), ("k7", "dog"): ("alone", "ambiguous_overlap")}
    assert at_04[("k5", "dog")] == "alone" and at_04[("k9", "dog")] == "ambiguous_overlap"
    unchanged = ~pl.col("image_id").is_in(["k6", "k7"]) | (pl.col("category") != "dog")
    assert kept_04.filter(unchanged).equals(kept_03)


# --- order ----------------------------------------------------------------------------------------------------------


def test_output_is_ordered_by_image_then_class_whatever_the_input_order():
    layout = {i: {"zebra": [[0, 0, 2, 2]], "apple": [[5, 5, 2, 2]], "mouse": [[0, 0, 5, 5]]} for i in ("b", "a", "c")}
    images, boxes = frames(layout)
    kept, rejects = masks.run(images, boxes, PARAMS)
    assert kept.select("image_id", "category").rows() == sorted(kept.select("image_id", "category").rows())
    assert kept["image_id"].to_list()[:3] == ["a", "a", "a"]
    again = masks.run(images.reverse(), boxes.sort("image_id", descending=True, maintain_order=True), PARAMS)
    assert again[0].equals(kept) and again[1].equals(rejects)

