"""Each model reads each image once: 30 pairs (with real images and a validated subset) through the real reader, a
cross-encoder re-ranking a bi-encoder's top 5; R@k of every set and the Δ, and ODmAP@k. A cross-encoder's task runs
two models, its first stage's embedding and itself, so it reads each image twice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from PIL import Image

from tasks.core.images import read_rgb
from tasks.core.schemas import SELECTED
from tasks.evaluation import evaluate
from tasks.evaluation.params import EvaluateParams
from tasks.evaluation.scorers import Asked, CrossEncoder, Images
from tasks.image import store
from tests.evaluation.fixtures import CAPTIONS

pytest_plugins = ["tests.evaluation.fixtures"]
PAIRS = 30


def thirty_pairs(root: Path) -> tuple[pl.DataFrame, Path, list[str | None]]:
    """(30 selected pairs with their PNGs in a store at root/img, root/img, a real image key for every third pair)."""
    rng = np.random.default_rng(0)
    rows, real = [], []
    for j in range(PAIRS):
        i_o, i_c = (rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(2))
        rows.append({**dict.fromkeys(SELECTED), "caption_id": f"{j}_0", "image_id": str(j),
                     "caption": f"{CAPTIONS[2 * (j % 3)]} {j}", "counterfactual": f"{CAPTIONS[2 * (j % 3) + 1]} {j}",
                     "image_o": store.write_png(root / "img", i_o), "image_c": store.write_png(root / "img", i_c)})
        real.append(None if j % 3 else str(root / f"real{j}.png"))
        if real[-1]:
            Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(real[-1])
    return pl.DataFrame(rows, schema=SELECTED), root / "img", real


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """Every image file the evaluation reads, counted through the real reader."""
    counted = Counter()

    def read(path: Path) -> np.ndarray:
        counted[Path(path)] += 1
        return read_rgb(path)

    monkeypatch.setattr(evaluate, "read_rgb", read)
    return counted


@pytest.mark.parametrize("name", ["hf_clip", "vilt"])  # the two paths: embeddings, and pairs scored by image
def test_each_model_reads_each_image_once(tmp_path, eval_specs, reads, name):
    selected, images, real = thirty_pairs(tmp_path)
    params = EvaluateParams(models={"hf_clip": eval_specs["hf_clip"], name: eval_specs[name]}, ks=(1, 5),
                            rerank_k=5, batch_size=16)
    models = 1 + (params.first_stage(eval_specs[name]) is not None)  # a cross-encoder: its first stage, then itself
    validated = [f"{j}_0" for j in range(0, PAIRS, 2)]
    evaluate.evaluate(name, eval_specs[name], selected, evaluate.reader(images), real, validated, params, None)
    every = {*(images / k for k in (*selected["image_o"], *selected["image_c"])), *(Path(k) for k in real if k)}
    assert set(reads) == every and len(every) == 2 * PAIRS + PAIRS // 3
    assert sum(reads.values()) / len(every) / models <= 1.05
    assert set(reads.values()) == {models}  # exactly: no image read twice by one model


def test_odmap_reads_each_query_image_once_per_model(tmp_path, eval_specs, reads):
    selected, images, _ = thirty_pairs(tmp_path)
    queries = pl.DataFrame({"image_1": selected["image_o"][:10], "removed": [["dog"]] * 10,
                            "remaining": [["couch"]] * 10})
    gallery = pl.DataFrame({"caption": selected["caption"], "classes": [["dog", "couch"], ["car"], ["man"]] * 10})
    params = EvaluateParams(models=eval_specs, ks=(1, 5), rerank_k=5, batch_size=16)
    evaluate.od_map(eval_specs["vilt"], queries, gallery, evaluate.reader(images), params)
    assert Counter(reads.values()) == {2: 10}  # each of the 10 query images: the first stage's read and ViLT's


def test_scored_pairs_are_the_asked_ones_scored_once_and_no_other():
    read = Counter()

    def pixels(key: str) -> np.ndarray:
        read[key] += 1
        return np.full((1, 1, 3), ord(key), dtype=np.uint8)

    model = CrossEncoder(lambda texts, images: torch.tensor([100. * len(t) + x[0, 0, 0]
                                                            for t, x in zip(texts, images)]))
    asked = Asked()
    asked.pairs(["x", "yy", "x", "zzz"], Images(("b", "a", "a", "a"), pixels))
    asked.pairs(["yy"], Images(("a",), pixels))  # asked again: scored once
    scored = asked.scored(model, pixels)
    assert read == {"a": 1, "b": 1}  # pairs in image-key order, one at a time: each image read once
    assert scored.pairs(["yy", "x", "x"], Images(("a", "b", "a"), pixels)).tolist() == [200 + 97, 100 + 98, 100 + 97]
    with pytest.raises(KeyError):
        scored.pairs(["yy"], Images(("b",), pixels))  # both known, the pair never asked
