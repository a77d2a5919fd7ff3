"""The removal_masks stage: every (image, class) decision of the instances file."""

from __future__ import annotations

import polars as pl
from prefect import flow

from flows.removal import finish
from tasks.removal import coco, masks
from tasks.stages import Params


@flow(name="removal-masks")
def removal_masks_flow(params: Params) -> dict:
    """Every (image, class) decision of the instances file: a removal (kept) or a reject with its reason."""
    images, boxes, bad = coco.read_instances(params.paths.removal_instances)
    kept, rejects = masks.run(images, boxes, params.removal_masks)
    eligible = images.height - int((rejects["reason"] == "fewer_than_two_classes").sum())
    tried = kept.height + int(rejects["category"].is_not_null().sum())
    return finish("removal_masks", images.height, kept, pl.concat([bad, rejects]), params.paths.removal_masks,
                   params, images=images.height, eligible=eligible, classes_tried=tried, removals=kept.height)
