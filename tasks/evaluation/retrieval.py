"""Zero-shot retrieval over a set of ground-truth (caption, image) pairs: R@k in both directions, ×100.

Duplicate captions (same text) and duplicate images (same store path: equal pixels) are merged first, so a caption
or image is one candidate however many pairs it belongs to; a hit is any of the top k candidates that forms a
ground-truth pair with the query. Ties keep candidate order (a stable sort on descending score), so the result
never depends on the sort implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RetrievalSet:
    """Unique captions and images, and which (caption, image) index pairs are ground truth."""

    captions: list[str]
    images: list[str]
    truth: frozenset[tuple[int, int]]

    @classmethod
    def of(cls, pairs: Sequence[tuple[str, str]]) -> RetrievalSet:
        """From (caption, image key) ground-truth pairs, in first-appearance order."""
        captions = list(dict.fromkeys(c for c, _ in pairs))
        images = list(dict.fromkeys(i for _, i in pairs))
        caption_at, image_at = {c: n for n, c in enumerate(captions)}, {i: n for n, i in enumerate(images)}
        return cls(captions, images, frozenset((caption_at[c], image_at[i]) for c, i in pairs))

    def truth_matrix(self) -> np.ndarray:
        """(captions × images) booleans: True where the pair is ground truth."""
        matrix = np.zeros((len(self.captions), len(self.images)), dtype=bool)
        for c, i in self.truth:
            matrix[c, i] = True
        return matrix


def recall_at_k(scores: np.ndarray, truth: np.ndarray, ks: Sequence[int]) -> dict[int, float]:
    """Per k: 100 × the share of query rows whose top-k columns (by `scores`, ties in column order) hold a True of
    `truth`. Rows are queries, columns candidates; both matrices have the same shape."""
    order = np.argsort(-scores, axis=1, kind="stable")
    hits = np.take_along_axis(truth, order, axis=1)
    return {k: float(100 * hits[:, :k].any(axis=1).mean()) if len(hits) else 0.0 for k in ks}


def retrieval(scores: np.ndarray, retrieval_set: RetrievalSet, ks: Sequence[int]) -> dict[str, float]:
    """`text_r@k` (each image retrieves captions) and `image_r@k` (each caption retrieves images) from a
    (captions × images) score matrix."""
    truth = retrieval_set.truth_matrix()
    text = recall_at_k(scores.T, truth.T, ks)
    image = recall_at_k(scores, truth, ks)
    return {**{f"text_r@{k}": v for k, v in text.items()}, **{f"image_r@{k}": v for k, v in image.items()}}
