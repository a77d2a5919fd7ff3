"""Selection: one canonically rendered (I_o, I_c) per caption pair, chosen from the screening scores.

Per pair the samples that pass (`thresholds.passing`) are ranked by `rank_by` (ties: lower sample index); the first
whose canonical render (alone, `render.canonical`) is finite, not black and still passes every threshold wins, and
its canonical scores are the ones exported. A candidate whose canonical render fails is a reject row
(`canonical_<reason>`) and the next one is tried. Pairs with no winner are pair-level rejects (`sample` null):
`all_samples_rejected` (every sample NaN/black), a subject reason (`original_subject_in_image_c`,
`substitute_in_image_o`: samples passed the CLIP thresholds, none the both-subjects check), `no_sample_passed`,
`no_canonical_render_passed`.
Candidates are rendered in rounds, one per rank, through a `Render` the caller supplies (the flow's is a Prefect
task cached by sample content), so a threshold change renders only newly chosen candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

import polars as pl

from tasks.core.schemas import PAIR, SCORE_COLUMNS, SELECTED, SELECTED_REJECTS, SUBJECT_COLUMNS
from tasks.image import store
from tasks.image.params import SelectionParams
from tasks.image.render import reject_reason
from tasks.image.sampling import Sample
from tasks.image.thresholds import SUBJECT_REASONS, clip_passing, ranked, subjects_failure

Render = Callable[[list[dict], list[Sample]], list[dict]]
"""Canonical renders (`render.canonical`: a measurement plus `images`) of (pair, sample) lists, in order."""
CANDIDATE_COLUMNS = [*PAIR, "sample", "seed", "p2p_fraction", "guidance_scale", "truncated_o", "truncated_c",
                     "tokens_misaligned"]


def failure(measured: dict, params: SelectionParams, black_threshold: int) -> str | None:
    """Why a canonical render cannot be the winner, or None when it can."""
    reason = reject_reason(measured, black_threshold)
    if reason is not None:
        return f"canonical_{reason}"
    for name, minimum in params.thresholds().items():
        if not measured[name] >= minimum:
            return f"canonical_below_{name}"
    margins = params.subject_margins()
    for name, reason in SUBJECT_REASONS.items():
        if name in margins and measured[name] is not None and not measured[name] > margins[name]:
            return f"canonical_{reason}"
    return None


def unselected(scores: pl.DataFrame, params: SelectionParams, selected_ids: list[str],
               exhausted: list[str]) -> pl.DataFrame:
    """Pair-level rejects for every pair of `scores` without a winner; `exhausted` pairs had candidates. A pair
    whose samples passed the CLIP thresholds but not the both-subjects check gets the check's reason for the one
    with the highest clip_dir."""
    return (scores.filter(~pl.col("caption_id").is_in(selected_ids))
            .with_columns(subjects=pl.when(clip_passing(params)).then(subjects_failure(params)))
            .sort("clip_dir", descending=True, nulls_last=True, maintain_order=True)
            .group_by(list(PAIR), maintain_order=True)
            .agg(all_rejected=pl.col("reject_reason").is_not_null().all(), subjects=pl.col("subjects").drop_nulls()
                 .first())
            .select(*PAIR, sample=pl.lit(None, pl.Int64), seed=pl.lit(None, pl.Int64), stage=pl.lit("selection"),
                    reason=pl.when(pl.col("caption_id").is_in(exhausted)).then(pl.lit("no_canonical_render_passed"))
                    .when("all_rejected").then(pl.lit("all_samples_rejected"))
                    .otherwise(pl.coalesce("subjects", pl.lit("no_sample_passed"))))
            .sort("caption_id"))


def selected_row(candidate: dict, measured: dict, tried: int, paths: tuple[str, str]) -> dict:
    return {**{k: candidate[k] for k in CANDIDATE_COLUMNS},
            **{k: measured[k] for k in (*SCORE_COLUMNS, *SUBJECT_COLUMNS)},
            "tried": tried, "image_o": paths[0], "image_c": paths[1]}


def fallthrough_row(candidate: dict, reason: str) -> dict:
    return {**{k: candidate[k] for k in (*PAIR, "sample", "seed")}, "stage": "selection", "reason": reason}


def run(scores: pl.DataFrame, params: SelectionParams, black_threshold: int, render: Render, images: Path,
        progress: Callable[[int], None] = lambda n: None) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(one winner per pair, rejects, candidates that fell through) from a `samples` score table; the winners' PNGs
    are written to the image store at `images`."""
    queue = {cid: rows.to_dicts() for (cid,), rows in
             ranked(scores, params).partition_by("caption_id", as_dict=True).items()}
    selected, dropped = [], []
    for rank in range(max((len(q) for q in queue.values()), default=0)):
        batch = [rows[rank] for rows in queue.values() if len(rows) > rank]
        results = render([{k: c[k] for k in PAIR} for c in batch],
                         [Sample(c["seed"], c["p2p_fraction"], c["guidance_scale"]) for c in batch])
        for candidate, result in zip(batch, results):
            reason = failure(result, params, black_threshold)
            if reason is not None:
                dropped.append(fallthrough_row(candidate, reason))
                continue
            paths = cast(tuple[str, str], tuple(store.write_png(images, image) for image in result["images"]))  # o, c
            selected.append(selected_row(candidate, result, rank + 1, paths))
            del queue[candidate["caption_id"]]
            progress(1)
    kept = pl.DataFrame(selected, schema=SELECTED).sort("caption_id")
    rejects = pl.concat([pl.DataFrame(dropped, schema=SELECTED_REJECTS),  # queue: pairs whose candidates all failed
                         unselected(scores, params, kept["caption_id"].to_list(), list(queue))]
                        ).sort("caption_id", "sample", nulls_last=True)
    return kept, rejects, len(dropped)
