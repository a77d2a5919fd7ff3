"""Zero-shot retrieval over a set of ground-truth (caption, image) pairs: R@k in both directions, ×100.

Duplicate captions (same text) and duplicate images (same store path: equal pixels) are merged first, so a caption
or image is one candidate however many pairs it belongs to; a hit is any of the top k candidates that forms a
ground-truth pair with the query. Ties keep candidate order (a stable sort on descending score), so the result
never depends on the sort implementation.

Rankings never hold a queries × candidates matrix: query rows are scored a block at a time (`BLOCK` scores) and
each row keeps its top k (`top_k`, the first k of that stable sort). A cross-encoder re-ranks a first stage's top k
(`rerank`), scoring only those (caption, image) pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

BLOCK = 2**25  # scores per block of query rows: 128 MiB of float32, about 1 GiB with top_k's temporaries

RowScores = Callable[[np.ndarray], np.ndarray]  # query row indices -> (rows × candidates) scores
PairScores = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (caption indices, image indices) -> scores


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

    def hits(self, ranked: np.ndarray, by_caption: bool) -> np.ndarray:
        """(queries × K) booleans: query row q and its candidate `ranked[q, i]` are a ground-truth pair; queries
        are captions (`by_caption`, candidates images) or images (candidates captions)."""
        truth = np.array(sorted(c * len(self.images) + i for c, i in self.truth), dtype=np.int64)
        return np.isin(_codes(ranked, by_caption, len(self.images)), truth)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """(rows × min(k, columns)) each row's column indices by descending score, ties in column order: exactly the
    first k columns of `np.argsort(-scores, axis=1, kind="stable")` (NaN last), without sorting whole rows."""
    k = min(k, scores.shape[1])
    if k == 0:
        return np.zeros((len(scores), 0), dtype=np.intp)
    negative = -scores
    kth = np.partition(negative, k - 1, axis=1)[:, k - 1:k]
    above, tied = negative < kth, negative == kth
    if np.isnan(kth).any():  # fewer than k numbers in a row: all of them rank first, its NaNs tie (sorts put NaN last)
        rows = np.isnan(kth[:, 0])
        above[rows], tied[rows] = ~np.isnan(negative[rows]), np.isnan(negative[rows])
    slots = k - above.sum(axis=1, keepdims=True)  # the tied columns that fit, first by column
    keep = above | (tied & (np.cumsum(tied, axis=1, dtype=np.int32) <= slots))
    columns = np.nonzero(keep)[1].reshape(len(scores), k)  # k per row, in column order
    order = np.argsort(np.take_along_axis(negative, columns, axis=1), axis=1, kind="stable")
    return np.take_along_axis(columns, order, axis=1)


def ranking(scores: RowScores, rows: int, columns: int, k: int, block: int = BLOCK) -> np.ndarray:
    """(rows × min(k, columns)) `top_k` of every query row, scoring about `block` scores (whole rows) at a time."""
    step = max(1, block // max(columns, 1))
    parts = [top_k(scores(np.arange(start, min(start + step, rows))), k) for start in range(0, rows, step)]
    return np.concatenate(parts) if parts else np.zeros((0, min(k, columns)), dtype=np.intp)


def rerank(scores: PairScores, firsts: Sequence[tuple[np.ndarray, bool]], images: int, k: int) -> list[np.ndarray]:
    """Each (candidates, by_caption) of `firsts`, re-ranked: the first k candidates of every query row (queries ×
    K, in first-stage order) ordered by descending `scores`, ties in column order, then the rest as they were.

    Queries are captions (`by_caption`, candidates images of `images`) or images. Each (caption, image) pair of
    any list is scored once, all in caption-major order (a dense score matrix's order), so with every candidate
    in the first k the result is `top_k` of the dense (captions × images) matrix or its transpose."""
    codes = [_codes(candidates[:, :k], by_caption, images) for candidates, by_caption in firsts]
    pairs = np.unique(np.concatenate([c.ravel() for c in codes]))
    score = scores(pairs // images, pairs % images)
    out = []
    for (candidates, _), code in zip(firsts, codes):
        by_column = np.argsort(candidates[:, :k], axis=1)
        head = np.take_along_axis(candidates[:, :k], by_column, axis=1)
        head_scores = score[np.searchsorted(pairs, np.take_along_axis(code, by_column, axis=1))]
        ranked = np.take_along_axis(head, top_k(head_scores, head.shape[1]), axis=1)
        out.append(np.concatenate([ranked, candidates[:, k:]], axis=1))
    return out


def _codes(candidates: np.ndarray, by_caption: bool, images: int) -> np.ndarray:
    """caption index × `images` + image index of each (query row, candidate)."""
    queries = np.arange(len(candidates))[:, None]
    captions, image = (queries, candidates) if by_caption else (candidates, queries)
    return captions * images + image


def recall_at_k(hits: np.ndarray, ks: Sequence[int]) -> dict[int, float]:
    """Per k: 100 × the share of query rows with a True among their first k ranked candidates (`hits`: queries ×
    K ground-truth flags in rank order, K >= min(max(ks), candidates))."""
    return {k: float(100 * hits[:, :k].any(axis=1).mean()) if len(hits) else 0.0 for k in ks}


def retrieval(by_image: np.ndarray, by_caption: np.ndarray, retrieval_set: RetrievalSet,
              ks: Sequence[int]) -> dict[str, float]:
    """`text_r@k` (each image retrieves captions: `by_image`, images × K caption indices) and `image_r@k` (each
    caption retrieves images: `by_caption`, captions × K image indices)."""
    text = recall_at_k(retrieval_set.hits(by_image, by_caption=False), ks)
    image = recall_at_k(retrieval_set.hits(by_caption, by_caption=True), ks)
    return {**{f"text_r@{k}": v for k, v in text.items()}, **{f"image_r@{k}": v for k, v in image.items()}}
