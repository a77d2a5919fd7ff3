"""COCO instances JSON -> `images(image_id, file_name, width, height)` and `boxes(image_id, category, x, y, w, h)`.

`image_id` is the COCO int id as text, `category` the COCO category name; crowd boxes are kept (they are objects too).
Invariant: every image entry ends in exactly one of (images, rejects), every annotation in exactly one of (boxes,
rejects). A reject row (`REMOVAL_MASKS_REJECTS`, stage `removal_masks`) says why:
  bad_image         image entry without an int `id`, a string `file_name` and positive int `width` and `height`
  duplicate_image   image `id` already kept (the first wins)
  unknown_image     annotation whose `image_id` is not a kept image's
  unknown_category  annotation whose `category_id` is not an `id` in `categories`
  bad_box           `bbox` not 4 finite numbers, `w` or `h` <= 0, or no pixel of the image inside it
Only a file that is not JSON, or lacks the `images`, `annotations` or `categories` list, is a one-line `UserError`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import cast

import polars as pl
from PIL import Image

from tasks.core import schemas
from tasks.core.errors import UserError
from tasks.core.io import not_a_file
from tasks.removal.masks import STAGE

IMAGES: schemas.Schema = {"image_id": pl.String, "file_name": pl.String, "width": pl.Int64, "height": pl.Int64}
BOXES: schemas.Schema = {"image_id": pl.String, "category": pl.String, **dict.fromkeys("xywh", pl.Float64)}
REJECTS_SCHEMA = schemas.REMOVAL_MASKS_REJECTS
_LISTS = ("images", "annotations", "categories")


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _load(path: Path) -> dict:
    if why := not_a_file(path):
        raise UserError(f"COCO instances file {path} {why}")
    try:
        doc = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as err:  # JSONDecodeError, bad UTF-8, an int over Python's digit limit
        raise UserError(f"{path}: not a COCO instances file (invalid JSON: {str(err).splitlines()[0]})") from err
    if not isinstance(doc, dict) or not all(isinstance(doc.get(key), list) for key in _LISTS):
        raise UserError(f"{path}: not a COCO instances file (needs the lists {', '.join(_LISTS)})")
    return doc


def _box(value: object, width: int, height: int) -> list[float] | None:
    """[x, y, w, h] when `value` is 4 finite numbers with w, h > 0 that cover a pixel of the image, else None."""
    if not (isinstance(value, list) and len(value) == 4 and all(type(v) in (int, float) for v in value)):
        return None
    try:
        x, y, w, h = map(float, value)
    except OverflowError:
        return None
    inside = x < width and y < height and x + w > 0 and y + h > 0
    return [x, y, w, h] if all(map(math.isfinite, (x, y, w, h))) and w > 0 and h > 0 and inside else None


def read_instances(path: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(images, boxes, rejects) of a COCO instances file (e.g. `instances_train2017.json`)."""
    doc = _load(path)
    names = {c["id"]: c["name"] for c in doc["categories"]
             if isinstance(c, dict) and _int(c.get("id")) is not None and isinstance(c.get("name"), str)}
    images: dict[str, dict] = {}
    boxes: list[dict[str, object]]
    rejects: list[dict[str, object]]
    boxes, rejects = [], []
    for entry in doc["images"]:
        entry = entry if isinstance(entry, dict) else {}
        image_id, file_name = _int(entry.get("id")), entry.get("file_name")
        width, height = _int(entry.get("width")), _int(entry.get("height"))
        row = {"image_id": None if image_id is None else str(image_id),
               "file_name": file_name if isinstance(file_name, str) else None, "width": width, "height": height}
        reason = ("bad_image" if width is None or height is None or None in row.values() or width <= 0 or height <= 0
                  else "image_too_large" if width * height > cast(int, Image.MAX_IMAGE_PIXELS)  # as read_rgb refuses it
                  else "duplicate_image" if row["image_id"] in images else None)
        if reason:
            rejects.append({"image_id": row["image_id"], "file_name": row["file_name"], "category": None,
                            "stage": STAGE, "reason": reason})
        else:
            images[cast(str, row["image_id"])] = row
    for ann in doc["annotations"]:
        ann = ann if isinstance(ann, dict) else {}
        image_id = _int(ann.get("image_id"))
        key = None if image_id is None else str(image_id)
        image, category = (None if key is None else images.get(key)), names.get(_int(ann.get("category_id")))
        reason = "unknown_image" if image is None else "unknown_category" if category is None else None
        box = None if image is None or category is None else _box(ann.get("bbox"), image["width"], image["height"])
        if box is None:
            rejects.append({"image_id": key, "file_name": image and image["file_name"], "category": category,
                            "stage": STAGE, "reason": reason or "bad_box"})
        else:
            boxes.append({"image_id": key, "category": category, **dict(zip("xywh", box))})
    return (pl.DataFrame(list(images.values()), schema=IMAGES), pl.DataFrame(boxes, schema=BOXES),
            pl.DataFrame(rejects, schema=REJECTS_SCHEMA))
