"""The selection thresholds as polars expressions over a `samples` score table, shared by selection (which ranks and
picks) and generate's adaptive screening (which stops once enough samples pass).

A sample passes when it was not rejected, every score is a number at or above its minimum (`>=`; NaN and null never
pass) and, for a noun swap, each subject margin that is checked exceeds its minimum (`>`: a tie fails).
"""

from __future__ import annotations

import polars as pl

from tasks.image.params import RANK_KEYS, SelectionParams

RANKING = {  # `SelectionParams.rank_by` -> its score (higher is better); a pair's samples share one edit type
    "clip_dir": pl.col("clip_dir"),
    "min_text_image": pl.min_horizontal("sim_text_image_o", "sim_text_image_c"),
    "subject_margin": pl.coalesce(pl.min_horizontal("subject_margin_o", "subject_margin_c"), "clip_dir"),
}
assert set(RANKING) == set(RANK_KEYS)
SUBJECT_REASONS = {"subject_margin_c": "original_subject_in_image_c", "subject_margin_o": "substitute_in_image_o"}


def clip_passing(params: SelectionParams) -> pl.Expr:
    """True for samples that pass every CLIP threshold (never null)."""
    checks = [pl.col(name).is_not_nan() & (pl.col(name) >= minimum) for name, minimum in params.thresholds().items()]
    return pl.all_horizontal(pl.col("reject_reason").is_null(), *checks).fill_null(False)


def subjects_failure(params: SelectionParams) -> pl.Expr:
    """The both-subjects check's reason for a sample (I_c checked first), null when it passes or does not apply."""
    margins = params.subject_margins()
    failures = [pl.when(~(pl.col(name) > margins[name])).then(pl.lit(reason))
                for name, reason in SUBJECT_REASONS.items() if name in margins]
    return pl.coalesce(*failures, pl.lit(None, pl.String))


def passing(params: SelectionParams) -> pl.Expr:
    """True for samples that pass every threshold and the both-subjects check (never null)."""
    return clip_passing(params) & subjects_failure(params).is_null()


def ranked(scores: pl.DataFrame, params: SelectionParams) -> pl.DataFrame:
    """Passing samples, best first (`params.rank_by`, ties: lower sample index) within each pair, pairs by
    caption_id; `rank` counts from 0 within a pair."""
    return (scores.filter(passing(params)).with_columns(_key=RANKING[params.rank_by])
            .sort(["caption_id", "_key", "sample"], descending=[False, True, False]).drop("_key")
            .with_columns(rank=pl.int_range(pl.len()).over("caption_id")))
