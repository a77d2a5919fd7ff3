"""The CLIP check on real filled images of the synthetic set (tiny CLIP), the split, and the export rows."""

import numpy as np
import polars as pl
import pytest
from PIL import Image

from tasks.core.schemas import INPAINTED, REMOVAL_EXPORT, REMOVAL_PAIRS
from tasks.core.specs import ClipSpec
from tasks.image.store import write_png
from tasks.removal import inpaint, release, selection
from tasks.removal.params import InpaintParams, RemovalSelectionParams


@pytest.fixture
def edits(removal_inputs, tmp_path):
    """Three zero-filled edits of synthetic images (two removals of image 2), stored under tmp_path."""
    coco = removal_inputs["coco"]
    rows = []
    for image_id, removed, boxes in (("2", ["dog", "frisbee"], [[8.0, 20.0, 24.0, 24.0]]),
                                     ("2", ["person"], [[40.0, 8.0, 12.0, 30.0]]),
                                     ("6", ["car"], [[2.0, 2.0, 20.0, 20.0]])):
        file_name = f"{int(image_id):012d}.png"
        with Image.open(coco / "images" / file_name) as image:
            original = np.asarray(image.convert("RGB"))
        edit = {"image_id": image_id, "file_name": file_name, "width": original.shape[1],
                "height": original.shape[0], "category": removed[0], "decision": "alone", "removed": removed,
                "remaining": ["bench"], "boxes": boxes, "area_share": 0.1, "caption_id": f"{image_id}_{removed[0]}",
                "caption": f"A {removed[0]} and a bench.", "edited_caption": "A bench.",
                "deleted": [f"a {removed[0]}"], "fill": "zero"}
        filled = inpaint.fill(original, edit, InpaintParams(fill="zero"))
        rows.append({**edit, "image_0": write_png(tmp_path, original), "image_1": write_png(tmp_path, filled)})
    return pl.DataFrame(rows, schema=INPAINTED), tmp_path


def clip_params(removal_inputs, **update) -> RemovalSelectionParams:
    clip = ClipSpec(id="cfgen-tiny-clip", pretrained=str(removal_inputs["clip_pretrained"]),
                    config=str(removal_inputs["clip_config"]))
    return RemovalSelectionParams(clip=clip, **update)


def test_thresholds_reject_with_their_reason_and_keep_the_rest(edits, removal_inputs):
    frame, root = edits
    lenient = clip_params(removal_inputs, min_drop=-2.0)
    clip = selection.load_models(lenient)
    kept, rejects = selection.run(frame, root, lenient, clip)
    assert kept.height == 3 and rejects.is_empty() and kept.schema == pl.Schema(REMOVAL_PAIRS)
    strict = selection.run(frame, root, clip_params(removal_inputs, min_drop=2.0), clip)
    assert strict[0].is_empty() and set(strict[1]["reason"]) == {"removed_class_still_shown"}
    mismatch = selection.run(frame, root, clip_params(removal_inputs, min_drop=-2.0, min_text_image=1.0), clip)
    assert mismatch[0].is_empty() and set(mismatch[1]["reason"]) == {"caption_mismatch"}
    threshold = float(kept["clip_drop"].median())
    some = selection.run(frame, root, clip_params(removal_inputs, min_drop=threshold), clip)[0]
    assert set(some["caption_id"]) == set(kept.filter(pl.col("clip_drop") > threshold)["caption_id"])


def test_split_depends_on_the_image_and_seed_only():
    params = RemovalSelectionParams(test_share=0.3, validation_share=0.2)
    splits = [selection.split_of(str(i), params) for i in range(2000)]
    shares = {s: splits.count(s) / len(splits) for s in ("train", "validation", "test")}
    assert shares == pytest.approx({"train": 0.5, "validation": 0.2, "test": 0.3}, abs=0.04)
    assert splits == [selection.split_of(str(i), params) for i in range(2000)]
    assert splits != [selection.split_of(str(i), params.model_copy(update={"seed": 1})) for i in range(2000)]
    all_test = RemovalSelectionParams(validation_share=0.0, test_share=1.0)
    assert {selection.split_of(str(i), all_test) for i in range(50)} == {"test"}


def test_export_rows_have_unique_ids_and_the_published_leading_columns(edits, removal_inputs):
    frame, root = edits
    params = clip_params(removal_inputs, min_drop=-2.0)
    kept, _ = selection.run(frame, root, params, selection.load_models(params))
    rows = release.dataset_rows(kept)
    assert rows.columns[:5] == ["id", "image_0", "image_1", "caption_0", "caption_1"]
    assert rows.schema == pl.Schema(REMOVAL_EXPORT) and rows["id"].n_unique() == 3
    assert rows.filter(pl.col("image_id") == "2")["id"].sort().to_list() == ["2_dog/dog+frisbee", "2_person/person"]
