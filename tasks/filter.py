"""Selection: one canonically rendered (I_o, I_c) per caption pair, chosen from the screening scores.

A sample passes when it was not rejected and every score is a number at or above its minimum (`>=`; NaN and null
never pass). Per pair the passing samples are ranked by clip_dir (ties: lower sample index); the first whose
canonical render (alone, `render.canonical`) is finite, not black and still passes every threshold wins, and its
canonical scores are the ones exported. A candidate whose canonical render fails is a reject row
(`canonical_<reason>`) and the next one is tried. Pairs with no winner are pair-level rejects (`sample` null):
`all_samples_rejected` (every sample NaN/black), `no_sample_passed`, `no_canonical_render_passed`.
"""

from __future__ import annotations

import polars as pl

from tasks.params import FilterParams
from tasks.schemas import PAIR, SCORE_COLUMNS, SELECTED, SELECTED_REJECTS

SCHEMA, REJECTS_SCHEMA = SELECTED, SELECTED_REJECTS
CANDIDATE_COLUMNS = [*PAIR, "sample", "seed", "p2p_fraction", "guidance_scale", "truncated_o", "truncated_c",
                     "tokens_misaligned"]


def thresholds(params: FilterParams) -> dict[str, float]:
    """Score column -> inclusive minimum."""
    return {"sim_text_image_o": params.min_text_image_o, "sim_text_image_c": params.min_text_image_c,
            "sim_image_image": params.min_image_image, "clip_dir": params.min_clip_dir}


def passing(params: FilterParams) -> pl.Expr:
    """True for samples that pass every threshold (never null)."""
    checks = [pl.col(name).is_not_nan() & (pl.col(name) >= minimum) for name, minimum in thresholds(params).items()]
    return pl.all_horizontal(pl.col("reject_reason").is_null(), *checks).fill_null(False)


def ranked(scores: pl.DataFrame, params: FilterParams) -> pl.DataFrame:
    """Passing samples, best first within each pair, pairs by caption_id; `rank` counts from 0 within a pair."""
    return (scores.filter(passing(params)).sort(["caption_id", "clip_dir", "sample"], descending=[False, True, False])
            .with_columns(rank=pl.int_range(pl.len()).over("caption_id")))


def failure(measured: dict, params: FilterParams, black_threshold: int) -> str | None:
    """Why a canonical render cannot be the winner, or None when it can."""
    from tasks.render import reject_reason

    reason = reject_reason(measured, black_threshold)
    if reason is not None:
        return f"canonical_{reason}"
    for name, minimum in thresholds(params).items():
        if not measured[name] >= minimum:
            return f"canonical_below_{name}"
    return None


def unselected(scores: pl.DataFrame, selected_ids: list[str], exhausted: list[str]) -> pl.DataFrame:
    """Pair-level rejects for every pair of `scores` without a winner; `exhausted` pairs had candidates."""
    return (scores.filter(~pl.col("caption_id").is_in(selected_ids))
            .group_by(list(PAIR), maintain_order=True)
            .agg(all_rejected=pl.col("reject_reason").is_not_null().all())
            .select(*PAIR, sample=pl.lit(None, pl.Int64), seed=pl.lit(None, pl.Int64), stage=pl.lit("filter"),
                    reason=pl.when(pl.col("caption_id").is_in(exhausted)).then(pl.lit("no_canonical_render_passed"))
                    .when("all_rejected").then(pl.lit("all_samples_rejected")).otherwise(pl.lit("no_sample_passed")))
            .sort("caption_id"))


def selected_row(candidate: dict, measured: dict, tried: int, paths: tuple[str, str]) -> dict:
    return {**{k: candidate[k] for k in CANDIDATE_COLUMNS}, **{k: measured[k] for k in SCORE_COLUMNS},
            "tried": tried, "image_o": paths[0], "image_c": paths[1]}


def fallthrough_row(candidate: dict, reason: str) -> dict:
    return {**{k: candidate[k] for k in (*PAIR, "sample", "seed")}, "stage": "filter", "reason": reason}
