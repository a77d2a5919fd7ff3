"""ODmAP@k: relevance, hand-computed cases under both normalisations, and block top-k against the dense stable sort
it replaced."""

import numpy as np
import pytest

from tasks.evaluation.odmap import NORMALISATIONS, od_map, relevance
from tasks.evaluation.retrieval import ranking


def dense_od_map(scores: np.ndarray, relevant: np.ndarray, ks, normalisation: str) -> dict[str, float]:
    """The reference: every query's whole gallery sorted (the implementation before block top-k)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    hits = np.take_along_axis(relevant, order, axis=1).astype(float)
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    out = {}
    for k in ks:
        divisor = np.maximum(hits[:, :k].sum(axis=1), 1) if normalisation == "relevant" else k
        out[f"odmap@{k}"] = float(100 * ((hits * precision)[:, :k].sum(axis=1) / divisor).mean()) if len(hits) \
            else 0.0
    return out


def blocked_od_map(scores: np.ndarray, relevant: np.ndarray, ks, rows_per_block: int,
                   normalisation: str = "k") -> dict[str, float]:
    ranked = ranking(lambda at: scores[at], *scores.shape, max(ks), block=rows_per_block * scores.shape[1])
    return od_map(np.take_along_axis(relevant, ranked, axis=1), ks, normalisation)


def test_relevance_excludes_removed_and_needs_a_present_class():
    gallery = [{"dog"}, {"dog", "cat"}, {"cat"}, set(), {"dog", "car"}]
    every = np.arange(5)[None, :]
    assert relevance([{"cat"}], [{"dog", "car"}], gallery, every).tolist() == [[True, False, False, False, True]]
    assert relevance([{"cat"}], [{"dog", "car"}], gallery, every, "all").tolist() == [[False] * 4 + [True]]
    # only the ranked captions are judged, in rank order
    assert relevance([{"cat"}], [{"dog", "car"}], gallery, np.array([[4, 2]])).tolist() == [[True, False]]


def test_odmap_hand_computed():
    # query 0 ranks gallery as 2, 0, 1, 3 (scores), relevant = {0, 3}: hits 0,1,0,0
    # query 1 ranks 0, 1, 2, 3 (a tie between 1 and 2 keeps gallery order), relevant = {0, 2}: hits 1,0,1,0
    scores = np.array([[0.5, 0.1, 0.9, 0.0], [0.9, 0.5, 0.5, 0.1]])
    relevant = np.array([[True, False, False, True], [True, False, True, False]])
    got = blocked_od_map(scores, relevant, ks=(1, 2, 3), rows_per_block=1)
    # AP@1: q0 0, q1 1·1/1 -> mean 0.5
    # AP@2: q0 (0 + 1·1/2)/2 = 0.25, q1 (1 + 0)/2 = 0.5 -> 0.375
    # AP@3: q0 (1/2)/3 = 1/6, q1 (1 + 2/3)/3 = 5/9 -> (1/6 + 5/9)/2 = 13/36
    assert got == pytest.approx({"odmap@1": 50.0, "odmap@2": 37.5, "odmap@3": 100 * 13 / 36})


def test_odmap_divides_by_the_relevant_captions_in_the_top_k_or_by_k():
    # Worked by hand, k = 5. Query 0's top 5 in rank order: relevant, not, relevant, relevant, not.
    #   relevant ranks 1, 3, 4: P@1 = 1/1, P@3 = 2/3, P@4 = 3/4; sum = 1 + 2/3 + 3/4 = 29/12
    #   by the relevant captions (3): 29/12 / 3 = 29/36        by k (5): 29/12 / 5 = 29/60
    # Query 1: not, relevant, not, not, not.
    #   relevant rank 2: P@2 = 1/2; sum = 1/2
    #   by the relevant captions (1): 1/2 / 1 = 1/2            by k (5): 1/2 / 5 = 1/10
    # Query 2: nothing relevant in its top 5: sum 0, AP 0 either way (no division by zero)
    # ODmAP@5 = 100 × the mean over the 3 queries:
    #   relevant: (29/36 + 18/36 + 0) / 3 = 47/108 ≈ 43.52     k: (29/60 + 6/60 + 0) / 3 = 35/180 ≈ 19.44
    relevant = np.array([[1, 0, 1, 1, 0], [0, 1, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=bool)
    assert od_map(relevant, (5,), "relevant") == pytest.approx({"odmap@5": 100 * 47 / 108})
    assert od_map(relevant, (5,), "k") == pytest.approx({"odmap@5": 100 * 35 / 180})
    # at k = 1 only the first rank counts: query 0 has P@1 = 1 over 1 relevant caption (or k = 1), the others 0
    assert od_map(relevant, (1,), "relevant") == od_map(relevant, (1,), "k") == pytest.approx({"odmap@1": 100 / 3})


@pytest.mark.parametrize("normalisation", NORMALISATIONS)
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rows_per_block", [1, 5, 50])  # 31 queries
def test_block_top_k_odmap_is_the_dense_one_bit_for_bit(seed, rows_per_block, normalisation):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 3, (31, 17)).astype(np.float32)
    relevant = rng.random((31, 17)) < 0.3
    ks = (1, 4, 10, 17, 25)
    assert blocked_od_map(scores, relevant, ks, rows_per_block, normalisation) == dense_od_map(scores, relevant, ks,
                                                                                                normalisation)


@pytest.mark.parametrize("normalisation", NORMALISATIONS)
def test_odmap_without_queries_is_zero(normalisation):
    assert od_map(np.zeros((0, 3), dtype=bool), (1,), normalisation) == {"odmap@1": 0.0}
