"""Training mixtures of real and counterfactual image-text rows (paper App. B.4.1), as `datasets` configs.

Rows: a *real* row (C_o, its real COCO image) for every selected caption whose real image exists, and two
*counterfactual* rows per selected pair, (C_o, I_o) and (C_c, I_c). A mixture takes a share of the real rows and a
share of the counterfactual pairs (both rows of a pair always together): `base` 50% / 25%, `medium` 100% / 75%,
`all` 100% / 100%. Choices are nested (base ⊂ medium ⊂ all) and seeded. Train / validation is 80 / 20 by
caption_id, the same for every mixture, so a caption's real and counterfactual rows are always on one side.
At full scale (17,410 pairs) this gives the paper's 13,928 / 34,820 / 41,784 training rows.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import datasets
import numpy as np
import polars as pl

from tasks.core.publication import replaced_folder
from tasks.core.schemas import Schema

MIXTURES = {"base": (0.5, 0.25), "medium": (1.0, 0.75), "all": (1.0, 1.0)}  # (real share, counterfactual share)
VALIDATION_SHARE = 0.2
SHARDS = re.compile(rf"({'|'.join(MIXTURES)})/(train|validation)-00000-of-00001\.parquet")  # what it writes
ROWS: Schema = {"id": pl.String, "caption_id": pl.String, "source": pl.String, "caption": pl.String,
                "image": pl.String}


def _seeded_order(ids: list[str], seed: int) -> list[str]:
    return [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))]


def validation_ids(caption_ids: list[str], seed: int) -> set[str]:
    """The seeded 20% of caption ids (rounded) whose rows form the validation split."""
    ids = sorted(set(caption_ids))
    return set(_seeded_order(ids, seed)[:round(VALIDATION_SHARE * len(ids))])


def mixture_rows(selected: pl.DataFrame, real_images: dict[str, str], seed: int) -> dict[str, pl.DataFrame]:
    """Per mixture name, its rows (`ROWS` + `split`), sorted by id. `real_images` maps a caption_id to its real
    image's path; generated image paths stay relative to the store."""
    pairs = selected.sort("caption_id")
    ids = pairs["caption_id"].to_list()
    with_real = [cid for cid in ids if cid in real_images]
    real_order, pair_order = _seeded_order(with_real, seed), _seeded_order(ids, seed + 1)
    validation = validation_ids(ids, seed)
    counterfactual = pl.concat([
        pairs.select(pl.col("caption_id"), source=pl.lit(side), caption=pl.col(text), image=pl.col(image))
        for side, text, image in (("original", "caption", "image_o"), ("counterfactual", "counterfactual", "image_c"))])
    real = pairs.filter(pl.col("caption_id").is_in(with_real)).select(
        "caption_id", source=pl.lit("real"), caption=pl.col("caption"),
        image=pl.col("caption_id").replace_strict(real_images, default=None, return_dtype=pl.String))
    out = {}
    for name, (real_share, pair_share) in MIXTURES.items():
        chosen_real = set(real_order[:math.floor(real_share * len(real_order))])
        chosen_pairs = set(pair_order[:math.floor(pair_share * len(pair_order))])
        rows = pl.concat([real.filter(pl.col("caption_id").is_in(chosen_real)),
                          counterfactual.filter(pl.col("caption_id").is_in(chosen_pairs))])
        out[name] = (rows.with_columns(id=pl.col("caption_id") + "_" + pl.col("source"),
                                       split=pl.when(pl.col("caption_id").is_in(validation))
                                       .then(pl.lit("validation")).otherwise(pl.lit("train")))
                     .select(*ROWS, "split").sort("id"))
    return out


def sizes(mixtures: dict[str, pl.DataFrame]) -> dict[str, dict[str, int]]:
    """Rows per split of every mixture."""
    return {name: {split: rows.filter(pl.col("split") == split).height for split in ("train", "validation")}
            for name, rows in mixtures.items()}


def write_mixtures(mixtures: dict[str, pl.DataFrame], images_dir: Path, out_dir: Path) -> list[Path]:
    """Make `out_dir` hold exactly `<mixture>/<split>-00000-of-00001.parquet` for every mixture, with the image bytes
    embedded (`datasets.Image`; path relative to the store, or the real file's name); returns the files. The folder
    is replaced as a whole (`replaced_folder`)."""
    features = datasets.Features({**{c: datasets.Value("string") for c in ROWS if c != "image"},
                                  "image": datasets.Image()})
    written = []
    with replaced_folder(out_dir, SHARDS) as staged:
        for name, rows in mixtures.items():
            (staged / name).mkdir()
            for split in ("train", "validation"):
                part = rows.filter(pl.col("split") == split).drop("split").to_dict(as_series=False)
                part["image"] = [{"bytes": (images_dir / path).read_bytes(),
                                  "path": Path(path).name if os.path.isabs(path) else path} for path in part["image"]]
                shard = Path(name, f"{split}-00000-of-00001.parquet")
                datasets.Dataset.from_dict(part, features=features).to_parquet(staged / shard)
                written.append(Path(out_dir) / shard)
    return written
