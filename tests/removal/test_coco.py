"""COCO instances reader: good entries kept as given, each bad one a reject with its reason, bad files a UserError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.core import schemas
from tasks.core.errors import UserError
from tasks.removal import coco, masks
from tasks.removal.params import RemovalMasksParams

IMAGES = [
    {"id": 1, "file_name": "a.jpg", "width": 10, "height": 8},
    {"id": 2, "file_name": "b.jpg", "width": 20, "height": 10},  # no annotation: still an image
    {"id": 1, "file_name": "again.jpg", "width": 5, "height": 5},
    {"id": "3", "file_name": "c.jpg", "width": 5, "height": 5},
    {"id": 4, "file_name": "d.jpg", "width": 0, "height": 5},
    {"id": 5, "width": 5, "height": 5},
    {"id": True, "file_name": "e.jpg", "width": 5, "height": 5},
    "not an object",
]
CATEGORIES = [{"id": 1, "name": "dog"}, {"id": 2, "name": "frisbee"}, {"id": 3, "name": "kite"}]
GOOD = [
    {"image_id": 1, "category_id": 1, "bbox": [1, 2, 3.5, 4], "iscrowd": 0},
    {"image_id": 1, "category_id": 2, "bbox": [0, 0, 10, 8], "iscrowd": 1},  # crowd boxes are objects too
    {"image_id": 1, "category_id": 3, "bbox": [-2, 7.5, 2.5, 9]},  # partly outside: kept, clipped when masked
]
BAD = [
    ({"image_id": 99, "category_id": 1, "bbox": [0, 0, 1, 1]}, ("99", None, "dog", "unknown_image")),
    ({"image_id": 3, "category_id": 1, "bbox": [0, 0, 1, 1]}, ("3", None, "dog", "unknown_image")),
    ({"image_id": "1", "category_id": 1, "bbox": [0, 0, 1, 1]}, (None, None, "dog", "unknown_image")),
    ({"category_id": 1, "bbox": [0, 0, 1, 1]}, (None, None, "dog", "unknown_image")),
    ("not an object", (None, None, None, "unknown_image")),
    ({"image_id": 1, "category_id": 7, "bbox": [0, 0, 1, 1]}, ("1", "a.jpg", None, "unknown_category")),
    ({"image_id": 1, "bbox": [0, 0, 1, 1]}, ("1", "a.jpg", None, "unknown_category")),
    *[({"image_id": 1, "category_id": 1, "bbox": bbox}, ("1", "a.jpg", "dog", "bad_box")) for bbox in (
        "1 2 3 4", [1, 2, 3], [1, 2, 3, 4, 5], [1, 2, 3, "4"], [1, 2, True, 4], [1, 2, None, 4], [1, 2, 0, 4],
        [1, 2, 3, -1], [1, 2, float("nan"), 4], [1, 2, float("inf"), 4], [1, 2, 10**400, 4], None,
        [10, 0, 1, 1], [0, 8, 1, 1], [-1, 0, 1, 1], [0, -2.5, 3, 2.5])],  # the last four: no pixel inside
    ({"image_id": 1, "category_id": 1}, ("1", "a.jpg", "dog", "bad_box")),
]


def write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def read(tmp_path):
    annotations = GOOD[:1] + [ann for ann, _ in BAD] + GOOD[1:]
    return coco.read_instances(write(tmp_path, {"images": IMAGES, "annotations": annotations,
                                                "categories": CATEGORIES}))


def test_good_images_and_boxes_are_kept_as_given(read):
    images, boxes, _ = read
    assert dict(images.schema) == coco.IMAGES and dict(boxes.schema) == coco.BOXES
    assert images.rows() == [("1", "a.jpg", 10, 8), ("2", "b.jpg", 20, 10)]
    assert boxes.rows() == [("1", "dog", 1.0, 2.0, 3.5, 4.0), ("1", "frisbee", 0.0, 0.0, 10.0, 8.0),
                            ("1", "kite", -2.0, 7.5, 2.5, 9.0)]


def test_each_bad_entry_is_one_reject_with_its_reason(read):
    images, boxes, rejects = read
    assert dict(rejects.schema) == schemas.REMOVAL_MASKS_REJECTS
    assert set(rejects["stage"]) == {"removal_masks"}
    image_rejects = [("1", "again.jpg", None, "duplicate_image"), (None, "c.jpg", None, "bad_image"),
                     ("4", "d.jpg", None, "bad_image"), ("5", None, None, "bad_image"),
                     (None, "e.jpg", None, "bad_image"), (None, None, None, "bad_image")]
    assert rejects.drop("stage").rows() == image_rejects + [expected for _, expected in BAD]
    assert images.height + len(image_rejects) == len(IMAGES)
    assert boxes.height + rejects.height - len(image_rejects) == len(GOOD) + len(BAD)


def test_the_read_frames_feed_the_mask_decisions(read):
    images, boxes, _ = read
    kept, rejects = masks.run(images, boxes, RemovalMasksParams())
    # dog: columns 1..4, rows 2..5 = 16 of 80 pixels; the crowd frisbee is the whole image; kite: column 0, row 7
    assert kept.select("category", "decision", "removed", "area_share").rows() == [
        ("dog", "alone", ["dog"], 0.2), ("kite", "alone", ["kite"], 1 / 80)]
    assert rejects.select("image_id", "category", "reason").rows() == [
        ("1", "frisbee", "mask_too_large"), ("2", None, "fewer_than_two_classes")]


def test_empty_lists_are_empty_frames(tmp_path):
    images, boxes, rejects = coco.read_instances(write(tmp_path, {"images": [], "annotations": [],
                                                                  "categories": []}))
    assert images.is_empty() and boxes.is_empty() and rejects.is_empty()
    assert dict(images.schema) == coco.IMAGES


@pytest.mark.parametrize("content", [
    b"{not json", b"", b"\xff\xfe\xfa", b"[]", b'"instances"', b'{"images": [], "annotations": []}',
    b'{"images": [], "annotations": {}, "categories": []}', b'{"images": null, "annotations": [], "categories": []}',
])
def test_a_malformed_file_is_a_one_line_user_error_naming_it(tmp_path, content):
    path = tmp_path / "instances.json"
    path.write_bytes(content)
    with pytest.raises(UserError) as err:
        coco.read_instances(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_an_image_over_the_pixel_limit_is_a_reject_not_a_crash(tmp_path):
    """Sizes no int64 holds, or over Pillow's pixel limit (which `images.read_rgb` refuses): `image_too_large`."""
    images = [{"id": 1, "file_name": "a.jpg", "width": 2**70, "height": 5},
              {"id": 2, "file_name": "b.jpg", "width": 20_000, "height": 20_000},
              {"id": 3, "file_name": "c.jpg", "width": 10, "height": 8}]
    kept, _, rejects = coco.read_instances(write(tmp_path, {"images": images, "annotations": [],
                                                            "categories": CATEGORIES}))
    assert kept.rows() == [("3", "c.jpg", 10, 8)]
    assert rejects.select("image_id", "reason").rows() == [("1", "image_too_large"), ("2", "image_too_large")]
