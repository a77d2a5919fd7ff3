"""The evaluate stage on three selected pairs: retrieval sets (all, validated, real + relative change), the filter
model flagged, Δ rows per pair and model, a missing PNG as one line."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from PIL import Image

from tasks.core.errors import UserError
from tasks.core.io import source_image_paths
from tasks.core.params import EvaluateParams
from tasks.evaluation import evaluate
from tasks.evaluation.retrieval import RetrievalSet, retrieval
from tasks.evaluation.scorers import load_scorer
from tests.evaluation.fixtures import selected_pairs

pytest_plugins = ["tests.evaluation.fixtures"]


@pytest.fixture
def world(tmp_path, eval_specs):
    selected, images, real = selected_pairs(tmp_path)
    real_paths = source_image_paths(selected["image_id"], real, "{image_id:0>12}.jpg")
    return selected, EvaluateParams(models=eval_specs, ks=(1, 5), batch_size=4), images, real_paths


def test_every_model_gets_every_retrieval_set_and_its_deltas(world, eval_specs):
    selected, params, images, real = world
    metrics, deltas = evaluate.run(selected, params, images, real, validated=["0_0", "2_0", "gone"],
                                   filter_clip=eval_specs["clip"])
    assert (metrics["pairs"], metrics["real_images"], metrics["validated_pairs"]) == (3, 2, 2)
    assert {name: m["used_to_filter"] for name, m in metrics["models"].items()} == {
        "clip": True, "hf_clip": False, "vilt": False, "bridgetower": False}
    assert deltas.height == 3 * len(eval_specs) and set(deltas["model"]) == set(eval_specs)
    for name, m in metrics["models"].items():
        assert set(m) == {"all", "validated", "real", "relative", "itm", "used_to_filter"}
        assert set(m["all"]) == {"text_r@1", "text_r@5", "image_r@1", "image_r@5"}
        for key, value in m["all"].items():
            base = m["real"][key]
            assert m["relative"][key] == (pytest.approx((value - base) / base) if base else None)
    # the validated set is pairs 0 and 2 only: recompute it with the model directly
    scorer = load_scorer(eval_specs["hf_clip"], 4)
    chosen = selected.filter(pl.col("caption_id").is_in(["0_0", "2_0"]))
    pairs = [p for r in chosen.iter_rows(named=True) for p in ((r["caption"], r["image_o"]), (r["counterfactual"],
                                                                                          r["image_c"]))]
    rs = RetrievalSet.of(pairs)
    pixels = [store_image(images / key) for key in rs.images]
    assert metrics["models"]["hf_clip"]["validated"] == retrieval(scorer.matrix(rs.captions, pixels), rs, (1, 5))


def store_image(path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def test_without_real_images_or_validation_those_sets_are_absent(world):
    selected, params, images, _ = world
    metrics, _ = evaluate.run(selected, params, images)
    assert set(metrics["models"]["vilt"]) == {"all", "itm", "used_to_filter"}
    assert metrics["validated_pairs"] is None and metrics["real_images"] == 0


def test_a_missing_png_is_one_line(world):
    selected, params, images, _ = world
    (images / selected["image_c"][1]).unlink()
    with pytest.raises(UserError, match="does not exist") as err:
        evaluate.run(selected, params, images)
    assert "\n" not in str(err.value)
