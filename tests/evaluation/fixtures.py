"""Tiny random evaluation models of each family (open_clip, HF CLIP bi-encoder, HF ViLT and BridgeTower
cross-encoders), built once per session; three selected pairs with their images; the dense R@k that block top-k
replaced, as a reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from tasks.core.schemas import SELECTED
from tasks.demo.tiny_eval import build_tiny_bridgetower, build_tiny_hf_clip, build_tiny_vilt
from tasks.evaluation.retrieval import RetrievalSet
from tasks.image import store
from tasks.tiny.images import build_tiny_clip

CAPTIONS = ["a dog sitting on a couch", "a cat sitting on a couch", "a red car on the street",
            "a red bus on the street", "a man riding a horse", "a man riding a bike"]


@pytest.fixture(scope="session")
def eval_specs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("eval_models")
    return {"clip": build_tiny_clip(root / "clip", seed=0), "hf_clip": build_tiny_hf_clip(root / "hf_clip", seed=0),
            "vilt": build_tiny_vilt(root / "vilt", CAPTIONS, seed=0),
            "bridgetower": build_tiny_bridgetower(root / "bridgetower", CAPTIONS, seed=0)}


def selected_pairs(root: Path) -> tuple[pl.DataFrame, Path, Path]:
    """(three selected pairs with their PNGs in a store at root/img, root/img, a folder of real COCO-named images
    for the first two pairs' image ids)."""
    rng = np.random.default_rng(0)
    rows = []
    for j in range(3):
        i_o, i_c = (rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(2))
        rows.append({**dict.fromkeys(SELECTED), "caption_id": f"{j}_0", "image_id": str(139 + j),
                     "caption": CAPTIONS[2 * j], "counterfactual": CAPTIONS[2 * j + 1],
                     "image_o": store.write_png(root / "img", i_o), "image_c": store.write_png(root / "img", i_c)})
    real = root / "coco"
    real.mkdir()
    for image_id in (139, 140):  # pair 2 has no real image
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(real / f"{image_id:012d}.jpg")
    return pl.DataFrame(rows, schema=SELECTED), root / "img", real


def dense_recall(scores: np.ndarray, truth: np.ndarray, ks) -> dict[int, float]:
    """R@k as it was before block top-k: a stable sort of every whole row of a dense (queries × candidates) matrix."""
    order = np.argsort(-scores, axis=1, kind="stable")
    hits = np.take_along_axis(truth, order, axis=1)
    return {k: float(100 * hits[:, :k].any(axis=1).mean()) if len(hits) else 0.0 for k in ks}


def truth_matrix(rs: RetrievalSet) -> np.ndarray:
    """(captions × images) booleans: True where the pair is ground truth."""
    matrix = np.zeros((len(rs.captions), len(rs.images)), dtype=bool)
    for c, i in rs.truth:
        matrix[c, i] = True
    return matrix
