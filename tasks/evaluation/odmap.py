"""ODmAP@k (Kim et al.): how well a model retrieves, for an image with an object removed, captions that do not
mention the removed object but do mention what is still there.

Queries are edited images, the gallery is every caption of the source set. A caption is relevant to a query iff none
of the classes it mentions was removed and it mentions some class still present (`all`: every class still present).
AP@k(q) = (1/n) Σ_{i≤k} rel_i · P@i with P@i the share of relevant captions in the top i, normalised by n:
- `relevant`: the relevant captions in the top k (AP 0 when there is none), mAP@k as in Musgrave et al.'s "A Metric
  Learning Reality Check" (pytorch-metric-learning's `mean_average_precision`), which Kim et al. cite for it;
- `k`: k itself, which also counts a top k that holds fewer relevant captions than k against the model.
ODmAP@k is its mean over queries, ×100. Ties keep gallery order (a stable sort on descending score), as in
`retrieval`; only each query's top max(k) captions are ranked (`retrieval.ranking`), and relevance is computed for
those alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np


def relevance(removed: Sequence[set[str]], remaining: Sequence[set[str]], gallery: Sequence[set[str]],
              ranked: np.ndarray, variant: Literal["any", "all"] = "any") -> np.ndarray:
    """(queries × K) booleans: gallery caption `ranked[q, i]` is relevant to query q."""
    present = (lambda r, g: bool(r & g)) if variant == "any" else (lambda r, g: r <= g)
    return np.array([[not (gone & gallery[g]) and present(left, gallery[g]) for g in row]
                     for gone, left, row in zip(removed, remaining, ranked)], dtype=bool).reshape(ranked.shape)


Normalisation = Literal["relevant", "k"]
NORMALISATIONS: tuple[Normalisation, ...] = ("relevant", "k")


def od_map(relevant: np.ndarray, ks: Sequence[int], normalisation: Normalisation) -> dict[str, float]:
    """`odmap@k` per k from (queries × K) relevance in rank order, K >= min(max(ks), gallery)."""
    hits = relevant.astype(float)
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)

    def divisor(k: int) -> np.ndarray | int:
        return np.maximum(hits[:, :k].sum(axis=1), 1) if normalisation == "relevant" else k

    return {f"odmap@{k}": float(100 * ((hits * precision)[:, :k].sum(axis=1) / divisor(k)).mean()) if len(hits)
            else 0.0 for k in ks}
