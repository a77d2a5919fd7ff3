import numpy as np
import pytest

from tasks.core.specs import ModelSpec
from tasks.removal import inpaint
from tasks.removal.masks import union_mask
from tasks.removal.params import InpaintParams

EDIT = {"image_id": "7", "caption_id": "7_0", "width": 20, "height": 12, "removed": ["dog"],
        "boxes": [[3.0, 2.0, 5.0, 4.0], [12.5, 6.0, 4.0, 3.0]], "edited_caption": "A cat on the grass."}


def image() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (EDIT["height"], EDIT["width"], 3), dtype=np.uint8)


@pytest.mark.parametrize("fill", ["zero", "mean", "blur"])
def test_every_fill_keeps_each_pixel_outside_the_mask(fill):
    params = InpaintParams(fill=fill, dilate=1)
    original, mask = image(), inpaint.mask_of(EDIT, params)
    edited = inpaint.fill(original, EDIT, params)
    assert edited.shape == original.shape and edited.dtype == np.uint8
    assert (edited[~mask] == original[~mask]).all() and (edited[mask] != original[mask]).any()
    if fill == "zero":
        assert (edited[mask] == 0).all()
    if fill == "mean":
        assert (edited[mask] == np.round(original.reshape(-1, 3).mean(0))).all()


def test_dilation_grows_the_boxes_by_exactly_that_many_pixels():
    plain = union_mask(EDIT["boxes"], EDIT["width"], EDIT["height"])
    grown = inpaint.mask_of(EDIT, InpaintParams(dilate=2))
    rows, cols = np.nonzero(plain[:, :9])  # the first box alone: columns 3..7, rows 2..5
    assert (rows.min(), rows.max(), cols.min(), cols.max()) == (2, 5, 3, 7)
    rows, cols = np.nonzero(grown[:, :10])
    assert (rows.min(), rows.max(), cols.min(), cols.max()) == (0, 7, 1, 9)


def test_prompts_and_the_seed_come_from_the_edit_not_its_position():
    params = InpaintParams()
    assert inpaint.prompts(EDIT, params) == ("A cat on the grass.", "dog")
    assert inpaint.edit_seed(EDIT, params) == inpaint.edit_seed(dict(EDIT), params)
    assert inpaint.edit_seed({**EDIT, "removed": ["cat"]}, params) != inpaint.edit_seed(EDIT, params)
    assert inpaint.edit_seed(EDIT, params.model_copy(update={"seed": 1})) != inpaint.edit_seed(EDIT, params)


def test_the_inpainting_model_fills_inside_the_mask_at_the_original_size_deterministically(removal_inputs):
    params = InpaintParams(model=ModelSpec(id=str(removal_inputs["inpaint"])), size=16, steps=2)
    pipe = inpaint.load_models(params)
    original, mask = image(), inpaint.mask_of(EDIT, params)
    first, second = (inpaint.fill(original, EDIT, params, pipe) for _ in range(2))
    assert first.shape == original.shape and (first == second).all()
    assert (first[~mask] == original[~mask]).all() and (first[mask] != original[mask]).any()
    other = inpaint.fill(original, EDIT, params.model_copy(update={"seed": 1}), pipe)
    assert (other[mask] != first[mask]).any()
