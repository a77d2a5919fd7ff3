"""Which classes to remove from a real image (Kim et al.): a decision for each (image, class c_r) by box-mask overlap.

Input `images(image_id, file_name, width, height)` and `boxes(image_id, category, x, y, w, h)` (`tasks.removal.coco`).
mask_q is the union of c_r's boxes, mask_g that of another class g of the image, both rasterised by `union_mask`:
  area(mask_q) / area(image) > alpha3                    -> reject `mask_too_large`
  every g: |mask_q ∩ mask_g| / |mask_g| < alpha1         -> remove c_r `alone`
  else some g overlaps by > alpha2                       -> remove c_r `with_overlapping` every such g
  else                                                   -> reject `ambiguous_overlap`
A removal of every class of the image is rejected as `nothing_remains`; one whose removed set an earlier c_r (by name)
of the image already kept is rejected as `duplicate_removal`. An image with fewer than two classes is one reject row
(`category` null), reason `fewer_than_two_classes`.

Invariant: every (image, class) decision lands in exactly one of (kept, rejects), both ordered by (image_id, category).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from tasks.core import schemas
from tasks.removal.params import RemovalMasksParams

SCHEMA, REJECTS_SCHEMA = schemas.REMOVAL_MASKS, schemas.REMOVAL_MASKS_REJECTS
STAGE = "removal_masks"
Box = list[float]


def union_mask(boxes: Sequence[Sequence[float]], width: int, height: int) -> np.ndarray:
    """Boolean (height, width) mask of the pixels any [x, y, w, h] box touches: columns floor(x) .. ceil(x + w) - 1
    and rows floor(y) .. ceil(y + h) - 1, clipped to the image (a fractional edge covers its whole pixel)."""
    mask = np.zeros((height, width), dtype=bool)
    for x, y, w, h in boxes:
        mask[max(math.floor(y), 0):max(math.ceil(y + h), 0), max(math.floor(x), 0):max(math.ceil(x + w), 0)] = True
    return mask


def _overlap(mask_q: np.ndarray, mask_g: np.ndarray) -> float:
    """|mask_q ∩ mask_g| / |mask_g|; a class with no pixel in the image is hidden by nothing (0)."""
    size = int(np.count_nonzero(mask_g))
    return int(np.count_nonzero(mask_q & mask_g)) / size if size else 0.0


def _choose(category: str, masks: dict[str, np.ndarray], share: float,
            params: RemovalMasksParams) -> tuple[str, tuple[str, ...]]:
    """(decision, removed classes in name order), or (reject reason, ()) for removing `category`."""
    if share > params.alpha3:
        return "mask_too_large", ()
    overlaps = {g: _overlap(masks[category], mask) for g, mask in masks.items() if g != category}
    if all(o < params.alpha1 for o in overlaps.values()):
        return "alone", (category,)
    covered = [g for g, o in overlaps.items() if o > params.alpha2]
    if covered:
        return "with_overlapping", tuple(sorted([category, *covered]))
    return "ambiguous_overlap", ()


def _decide(image: dict, by_class: dict[str, list[Box]],
            params: RemovalMasksParams) -> tuple[list[dict], list[dict]]:
    """(kept, rejects) rows of one image."""
    ident = {"image_id": image["image_id"], "file_name": image["file_name"]}
    if len(by_class) < 2:
        return [], [{**ident, "category": None, "stage": STAGE, "reason": "fewer_than_two_classes"}]
    width, height = image["width"], image["height"]
    masks = {c: union_mask(b, width, height) for c, b in by_class.items()}
    kept, rejects, seen = [], [], set()
    for category in sorted(by_class):
        share = int(np.count_nonzero(masks[category])) / (width * height)
        decision, removed = _choose(category, masks, share, params)
        reason = (decision if not removed else "nothing_remains" if len(removed) == len(masks)
                  else "duplicate_removal" if removed in seen else None)
        if reason:
            rejects.append({**ident, "category": category, "stage": STAGE, "reason": reason})
            continue
        seen.add(removed)
        kept.append({**ident, "width": width, "height": height, "category": category, "decision": decision,
                     "removed": list(removed), "remaining": sorted(set(by_class) - set(removed)),
                     "boxes": [box for c in removed for box in by_class[c]], "area_share": share})
    return kept, rejects


def run(images: pl.DataFrame, boxes: pl.DataFrame, params: RemovalMasksParams) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept, rejects): the removal decisions of every image of `images` over its rows of `boxes`."""
    by_image: dict[str, dict[str, list[Box]]] = {}
    for image_id, category, *box in boxes.select("image_id", "category", "x", "y", "w", "h").iter_rows():
        by_image.setdefault(image_id, {}).setdefault(category, []).append(box)
    kept, rejects = [], []
    for image in images.sort("image_id").iter_rows(named=True):
        image_kept, image_rejects = _decide(image, by_image.get(image["image_id"], {}), params)
        kept.extend(image_kept)
        rejects.extend(image_rejects)
    return pl.DataFrame(kept, schema=SCHEMA), pl.DataFrame(rejects, schema=REJECTS_SCHEMA)
