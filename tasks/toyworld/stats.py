"""Rates with their uncertainty, for truth.json: every rate carries its count and a 95% interval.

A share of independent trials gets Wilson's score interval (scipy). A statistic over a run's samples, which cluster by
caption pair (one pair's samples share its captions), gets a percentile bootstrap that resamples whole pairs, seeded,
so the same run always reports the same interval.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl
from scipy.stats import binomtest

BOOTSTRAP = 2000  # resamples of the caption pairs
LEVEL = 0.95


def _round(value: float) -> float:
    return round(float(value), 4)


def rate(values: pl.Series) -> dict:
    """{rate, count, of, ci95} of a boolean series: the share of True with Wilson's 95% interval (None when empty)."""
    count, total = int(values.sum()), values.len()
    if not total:
        return {"rate": None, "count": 0, "of": 0, "ci95": None}
    interval = binomtest(count, total).proportion_ci(LEVEL, method="wilson")
    return {"rate": _round(count / total), "count": count, "of": total,
            "ci95": [_round(interval.low), _round(interval.high)]}


def by_pair(sums: pl.DataFrame, statistic: Callable[[dict[str, float]], float | None]) -> dict:
    """{value, ci95} of `statistic(totals)`, where `sums` holds one row per caption pair of numeric columns and
    `totals` their column sums; the interval resamples the pairs with replacement (a pair drawn twice counts twice).
    None where the statistic is undefined."""
    columns = sums.columns
    value = statistic(dict(zip(columns, sums.sum().row(0)))) if sums.height else None
    if value is None:
        return {"value": None, "ci95": None}
    rng = np.random.default_rng(0)
    weights = np.stack([np.bincount(rng.integers(0, sums.height, sums.height), minlength=sums.height)
                        for _ in range(BOOTSTRAP)])
    totals = weights @ sums.to_numpy().astype(np.float64)
    values = [v for row in totals if (v := statistic(dict(zip(columns, row)))) is not None]
    low, high = np.percentile(values, [50 * (1 - LEVEL), 50 * (1 + LEVEL)])
    return {"value": _round(value), "ci95": [_round(low), _round(high)]}
