"""The judge's verdict from its four P(Yes), applied after the cache (a threshold change re-asks nothing).

A question is answered yes when P(Yes) >= its threshold. A pair passes when I_o shows the original, I_c the
substitute, and neither shows the other's; a failing pair's reason is its first failed check in `JUDGE_QUESTIONS`
order.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from tasks.core.schemas import JUDGE_QUESTIONS

EXPECTED = {"original_o": True, "substitute_c": True, "substitute_o": False, "original_c": False}
REASONS = {"original_o": "judge_original_missing", "substitute_c": "judge_substitute_missing",
           "substitute_o": "judge_substitute_in_image_o", "original_c": "judge_original_in_image_c"}


def answered_yes(question: str, threshold: float) -> pl.Expr:
    return pl.col(f"judge_{question}") >= threshold


def verdicts(judged: pl.DataFrame, thresholds: Mapping[str, float]) -> pl.DataFrame:
    """`judged` (a `judge_<question>` P(Yes) column per question) with `judge_pass` and `judge_reason`."""
    failed = [pl.when(answered_yes(q, thresholds[q]) != EXPECTED[q]).then(pl.lit(REASONS[q]))
              for q in JUDGE_QUESTIONS]
    return judged.with_columns(judge_reason=pl.coalesce(failed)).with_columns(
        judge_pass=pl.col("judge_reason").is_null())
