"""Selection over the score table alone (no models): one (I_o, I_c) sample per caption pair, or a reject.

A sample passes when it was not rejected at generation and every score is a number at or above its minimum
(`>=`; NaN and null never pass). Per pair the passing sample with the highest clip_dir wins, ties going to the
lower sample index. Output: the winning score rows plus `needs_regeneration` (no stored PNG: run
`generate.regenerate` on the row), sorted by caption_id; and one reject per pair without a passing sample:
`all_samples_rejected` (every sample NaN/black) or `no_sample_passed`. Re-filtering with new thresholds is just
another call on the same table.
"""

from __future__ import annotations

import polars as pl

from tasks.params import FilterParams

PAIR_COLUMNS = ["caption_id", "image_id", "caption", "counterfactual"]


def thresholds(params: FilterParams) -> dict[str, float]:
    """Score column -> inclusive minimum."""
    return {"sim_text_image_o": params.min_text_image_o, "sim_text_image_c": params.min_text_image_c,
            "sim_image_image": params.min_image_image, "clip_dir": params.min_clip_dir}


def passing(params: FilterParams) -> pl.Expr:
    """True for samples that pass every threshold (never null)."""
    checks = [pl.col(name).is_not_nan() & (pl.col(name) >= minimum) for name, minimum in thresholds(params).items()]
    return pl.all_horizontal(pl.col("reject_reason").is_null(), *checks).fill_null(False)


def run(scores: pl.DataFrame, params: FilterParams) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(selected samples + needs_regeneration, rejected pairs) for a `generate` score table."""
    selected = (scores.filter(passing(params))
                .sort(["caption_id", "clip_dir", "sample"], descending=[False, True, False])
                .unique(subset="caption_id", keep="first", maintain_order=True)
                .with_columns(needs_regeneration=pl.col("image_o").is_null() | pl.col("image_c").is_null()))
    rejects = (scores.filter(~pl.col("caption_id").is_in(selected["caption_id"].implode()))
               .group_by(PAIR_COLUMNS, maintain_order=True)
               .agg(n_samples=pl.len(), all_rejected=pl.col("reject_reason").is_not_null().all())
               .select(*PAIR_COLUMNS, "n_samples", stage=pl.lit("filter"),
                       reason=pl.when("all_rejected").then(pl.lit("all_samples_rejected"))
                       .otherwise(pl.lit("no_sample_passed")))
               .sort("caption_id"))
    return selected, rejects
