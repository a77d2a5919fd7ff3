"""Generate's tasks: caption pairs cut into contiguous runs of near-equal sample counts, handed out largest first.

The cut may change freely (with the input, `n_samples` or `pairs_per_task`) and invalidates nothing: a sample's
cache is its pair's record (`records.PairRecords`, keyed by the pair's and the sample's content) and a task caches
nothing, so any cut renders exactly the samples missing from the records and yields the same rows. Runs are
contiguous, so their rows concatenated in input order are the output in input order. A run ends at the first pair
whose running sample total reaches the run's share of the whole, so it holds its share plus at most one pair: when
no pair outweighs a share, the longest task is at most twice the mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def sample_cut(samples: Sequence[int], per_task: int) -> list[range]:
    """Positions of the pairs (`samples[i]`: pair i's samples) in at most `ceil(len(samples) / per_task)` non-empty
    contiguous runs of near-equal sample totals, covering each position once; the heaviest first (ties: in order)."""
    if not samples:
        return []
    totals = np.cumsum(samples, dtype=np.int64)
    tasks = math.ceil(len(samples) / per_task)
    shares = (totals[-1] * np.arange(1, tasks + 1) + tasks - 1) // tasks  # ceil: totals are whole samples
    ends = np.unique(np.append(np.searchsorted(totals, shares) + 1, len(samples)))
    weights = np.diff(totals[ends - 1], prepend=0)
    starts = np.append(0, ends[:-1])
    return [range(int(starts[i]), int(ends[i])) for i in np.argsort(-weights, kind="stable")]
