"""Training mixtures: the paper's shares, nested choices, pairs never split, one split per caption, written configs."""

from __future__ import annotations

import datasets
import numpy as np
import polars as pl
from PIL import Image

from tasks.core.schemas import SELECTED
from tasks.image import store
from tasks.release import mixtures


def selected(n: int) -> pl.DataFrame:
    return pl.DataFrame([{**dict.fromkeys(SELECTED), "caption_id": f"{i}_0", "image_id": str(i),
                          "caption": f"a dog {i}", "counterfactual": f"a cat {i}", "image_o": f"o/{i}.png",
                          "image_c": f"c/{i}.png"}
                         for i in range(n)], schema=SELECTED)


def test_shares_nesting_and_pair_integrity():
    pairs = selected(40)
    real = {f"{i}_0": f"/coco/{i:012d}.jpg" for i in range(36)}  # 4 captions have no real image
    mixes = mixtures.mixture_rows(pairs, real, seed=0)
    counts = {name: rows.group_by("source").len().sort("source").rows() for name, rows in mixes.items()}
    assert counts == {"base": [("counterfactual", 10), ("original", 10), ("real", 18)],
                      "medium": [("counterfactual", 30), ("original", 30), ("real", 36)],
                      "all": [("counterfactual", 40), ("original", 40), ("real", 36)]}
    validation = mixtures.validation_ids(pairs["caption_id"].to_list(), seed=0)
    assert len(validation) == 8
    for name, rows in mixes.items():
        per_caption = rows.group_by("caption_id").agg(pl.col("split").n_unique(), pl.col("source"))
        assert per_caption["split"].max() == 1  # a caption's rows all on one side
        assert all(("original" in s) == ("counterfactual" in s) for s in per_caption["source"])  # pairs whole
        assert set(rows.filter(pl.col("split") == "validation")["caption_id"]) <= validation
        assert rows["id"].is_unique().all()
    ids = {name: set(rows["id"]) for name, rows in mixes.items()}
    assert ids["base"] <= ids["medium"] <= ids["all"]
    again = mixtures.mixture_rows(pairs, real, seed=0)
    assert all(again[name].equals(rows) for name, rows in mixes.items())
    assert not mixes["base"].equals(mixtures.mixture_rows(pairs, real, seed=1)["base"])
    sizes = mixtures.sizes(mixes)
    assert {name: sum(s.values()) for name, s in sizes.items()} == {"base": 38, "medium": 96, "all": 116}


def test_written_configs_load_with_datasets_and_embed_the_images(tmp_path):
    pairs = selected(5)
    rng = np.random.default_rng(0)
    paths = {}
    for i in range(5):
        for side in ("o", "c"):
            paths[f"{side}/{i}.png"] = store.write_png(tmp_path / "img", rng.integers(0, 256, (8, 8, 3), np.uint8))
    pairs = pairs.with_columns(image_o=pl.col("image_o").replace_strict(paths),
                               image_c=pl.col("image_c").replace_strict(paths))
    (tmp_path / "coco").mkdir()
    real = {}
    for i in range(5):
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), np.uint8)).save(tmp_path / "coco" / f"{i}.jpg")
        real[f"{i}_0"] = str(tmp_path / "coco" / f"{i}.jpg")
    mixes = mixtures.mixture_rows(pairs, real, seed=0)
    written = mixtures.write_mixtures(mixes, tmp_path / "img", tmp_path / "out")
    assert len(written) == 6
    loaded = datasets.load_dataset("parquet", data_files={"train": str(tmp_path / "out/all/train-*.parquet"),
                                                          "validation": str(tmp_path / "out/all/validation-*.parquet")})
    assert loaded["train"].num_rows + loaded["validation"].num_rows == mixes["all"].height == 15
    row = next(r for r in loaded["train"] if r["source"] == "counterfactual")
    i = int(row["caption_id"].split("_")[0])
    assert np.array_equal(np.asarray(row["image"]), store_pixels(tmp_path / "img" / paths[f"c/{i}.png"]))


def store_pixels(path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def test_without_real_images_mixtures_hold_counterfactual_rows_only():
    mixes = mixtures.mixture_rows(selected(8), {}, seed=0)
    assert {name: sorted(set(rows["source"])) for name, rows in mixes.items()} == {
        name: ["counterfactual", "original"] for name in ("base", "medium", "all")}
    assert mixtures.sizes(mixes)["all"]["train"] + mixtures.sizes(mixes)["all"]["validation"] == 16
