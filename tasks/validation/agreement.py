"""Human validation results from ratings (`labelstudio.RATINGS`): paper Table 1, Fleiss' κ on the overlap images,
how their labels split, coverage and the human-validated subset.

An image's label is the majority of its ratings' choices; a tie goes to the choice that comes first in TIE_ORDER
(the least favourable), so a tie never counts an image as correct. Table 1 shares are over labelled images; coverage
says how many of all images that is.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tasks.core.errors import UserError
from tasks.validation.labelstudio import CHOICES

TABLE1_LABELS = {"own": "correct", "other": "incorrect", "neither": "neither", "both": "both"}  # choice -> Table 1
TIE_ORDER = ("other", "neither", "both", "own")
SOURCES = {"I_o": ["o"], "I_c": ["c"], "all": ["o", "c"]}  # Table 1 row -> sides: images from C_o, C_c, both
KEY = ["caption_id", "side"]


def check_images(ratings: pl.DataFrame, images: pl.DataFrame) -> None:
    """Raise a one-line UserError when a rating is of an image that `images` lacks (an export of another run)."""
    unknown = ratings.select(KEY).unique().join(images, on=KEY, how="anti").sort(KEY)
    if unknown.height:
        first = unknown.row(0, named=True)
        raise UserError(f"{unknown.height} rated images are not in the selection (first: caption {first['caption_id']}"
                        f" side {first['side']}): the export is from another run")


def image_labels(ratings: pl.DataFrame) -> pl.DataFrame:
    """One row per rated image: caption_id, side, n_ratings, label (majority choice, ties by TIE_ORDER)."""
    rank = {choice: n for n, choice in enumerate(TIE_ORDER)}
    votes = ratings.group_by([*KEY, "choice"]).len("votes").with_columns(rank=pl.col("choice").replace_strict(rank))
    return (votes.sort([*KEY, "votes", "rank"], descending=[False, False, True, False])
            .group_by(KEY, maintain_order=True)
            .agg(n_ratings=pl.col("votes").sum(), label=pl.col("choice").first()))


def table1(labels: pl.DataFrame) -> pl.DataFrame:
    """Paper Table 1 (long form): images (I_o, I_c, all) x label (correct, incorrect, neither, both) -> count, share
    of that row's labelled images (null when it has none)."""
    rows = []
    for source, sides in SOURCES.items():
        chosen = labels.filter(pl.col("side").is_in(sides))
        for choice, name in TABLE1_LABELS.items():
            count = chosen.filter(pl.col("label") == choice).height
            rows.append({"images": source, "label": name, "count": count,
                         "share": count / chosen.height if chosen.height else None})
    return pl.DataFrame(rows, schema={"images": pl.String, "label": pl.String, "count": pl.Int64,
                                      "share": pl.Float64})


def fleiss_kappa(counts: np.ndarray) -> float | None:
    """Fleiss' κ of an items x categories matrix of rater counts, every row summing to the same n >= 2; None where
    chance agreement is 1 (every rating in one category) or there are no items."""
    counts = np.asarray(counts, dtype=float)
    if counts.size == 0:
        return None
    n = counts.sum(axis=1)
    if not np.all(n == n[0]) or n[0] < 2:
        raise ValueError(f"every item needs the same number (>= 2) of ratings, got {sorted(set(n.tolist()))}")
    agreement = ((counts * (counts - 1)).sum(axis=1) / (n[0] * (n[0] - 1))).mean()
    chance = ((counts.sum(axis=0) / counts.sum()) ** 2).sum()
    return None if chance == 1 else float((agreement - chance) / (1 - chance))


def overlap_counts(ratings: pl.DataFrame, raters: int = 3) -> pl.DataFrame:
    """caption_id, side and one count column per choice (CHOICES order) for images with exactly `raters` ratings."""
    overlap = ratings.filter(pl.len().over(KEY) == raters)
    return overlap.select(*KEY, *[(pl.col("choice") == c).cast(pl.Int64).alias(c) for c in CHOICES]) \
        .group_by(KEY).sum().sort(KEY)


def overlap_kappa(ratings: pl.DataFrame, raters: int = 3) -> float | None:
    """Fleiss' κ over the four choices on the images rated by exactly `raters` annotators."""
    return fleiss_kappa(overlap_counts(ratings, raters).select(CHOICES).to_numpy())


def disagreements(ratings: pl.DataFrame, raters: int = 3) -> pl.DataFrame:
    """How the overlap images' ratings split: split (e.g. "3", "2-1", "1-1-1"), labels (the choices, most voted
    first, e.g. "own+own+other") -> images, most frequent first."""
    def describe(row: dict) -> dict:
        votes = sorted(((row[c], c) for c in CHOICES if row[c]), key=lambda v: (-v[0], CHOICES.index(v[1])))
        return {"split": "-".join(str(n) for n, _ in votes), "labels": "+".join(c for n, c in votes for _ in range(n))}

    described = [describe(row) for row in overlap_counts(ratings, raters).iter_rows(named=True)]
    frame = pl.DataFrame(described, schema={"split": pl.String, "labels": pl.String})
    return frame.group_by("split", "labels").len("images").sort(["images", "split", "labels"],
                                                                descending=[True, False, False])


def coverage(ratings: pl.DataFrame, images: pl.DataFrame) -> dict[str, float | int | None]:
    """Images with at least one rating among all `images` (caption_id, side), and their share."""
    check_images(ratings, images)
    rated = ratings.select(KEY).unique().height
    return {"images": images.height, "rated": rated, "share": rated / images.height if images.height else None}


def validated(labels: pl.DataFrame) -> list[str]:
    """The human-validated subset: caption_ids whose I_o and I_c were both labelled with their own caption."""
    own = labels.filter(pl.col("label") == "own").group_by("caption_id").agg(pl.col("side").n_unique().alias("n"))
    return sorted(own.filter(pl.col("n") == len(SOURCES["all"]))["caption_id"].to_list())


def summary(ratings: pl.DataFrame, images: pl.DataFrame, raters: int = 3) -> dict:
    """Every result as plain JSON types: coverage, Table 1, κ, the overlap split, the validated count and
    `duplicate_annotations`, the repeated annotations of an image by one annotator that were set aside (see
    `labelstudio.ratings` for which one counts)."""
    labels = image_labels(ratings)
    overlap = overlap_counts(ratings, raters)
    return {"coverage": coverage(ratings, images), "table1": table1(labels).to_dicts(),
            "fleiss_kappa": overlap_kappa(ratings, raters), "overlap_images": overlap.height,
            "disagreements": disagreements(ratings, raters).to_dicts(), "validated_pairs": len(validated(labels)),
            "duplicate_annotations": int((ratings["annotations"] - 1).sum())}
