"""R@k on a hand-computed 4×4 case (2 pairs: C_o1, C_c1, C_o2, C_c2 × I_o1, I_c1, I_o2, I_c2), ties, duplicates;
block top-k and cross-encoder re-ranking against a dense stable sort on tie-heavy random matrices."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.evaluation.retrieval import RetrievalSet, ranking, recall_at_k, rerank, retrieval, top_k
from tests.evaluation.fixtures import dense_recall, truth_matrix

PAIRS = [("C_o1", "I_o1"), ("C_c1", "I_c1"), ("C_o2", "I_o2"), ("C_c2", "I_c2")]
SCORES = np.array([[0.9, 0.8, 0.1, 0.0],   # C_o1
                   [0.7, 0.6, 0.2, 0.3],   # C_c1
                   [0.1, 0.2, 0.5, 0.5],   # C_o2 (tie: I_o2 comes first)
                   [0.0, 0.1, 0.5, 0.4]])  # C_c2


def blocked(scores: np.ndarray, k: int, rows_per_block: int) -> np.ndarray:
    return ranking(lambda at: scores[at], *scores.shape, k, block=rows_per_block * scores.shape[1])


def retrieve(scores: np.ndarray, rs: RetrievalSet, ks, rows_per_block: int = 2) -> dict[str, float]:
    k = max(ks)
    return retrieval(blocked(scores.T.copy(), k, rows_per_block), blocked(scores, k, rows_per_block), rs, ks)


def tie_heavy(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Scores from four values, with a few ±inf and NaN."""
    scores = rng.integers(0, 4, shape).astype(np.float32) / 4
    scores.flat[rng.choice(scores.size, 3)] = [np.inf, -np.inf, np.nan]
    return scores


def test_hand_computed_recall_in_both_directions():
    # text retrieval (an image ranks captions, by column): I_o1 -> C_o1 hit; I_c1 -> C_o1 miss, then C_c1;
    # I_o2 -> tie C_o2/C_c2, C_o2 first: hit; I_c2 -> C_o2 miss, then C_c2. Image retrieval mirrors it by rows.
    result = retrieve(SCORES, RetrievalSet.of(PAIRS), ks=(1, 2, 4), rows_per_block=3)
    assert result == {"text_r@1": 50.0, "text_r@2": 100.0, "text_r@4": 100.0,
                      "image_r@1": 50.0, "image_r@2": 100.0, "image_r@4": 100.0}


def test_ties_keep_candidate_order():
    rs = RetrievalSet.of([("a", "y"), ("b", "x")])  # captions a, b; images y, x: truth (0, 0), (1, 1)
    tied = retrieve(np.array([[0.5, 0.5], [0.5, 0.5]]), rs, ks=(1,))
    assert tied == {"text_r@1": 50.0, "image_r@1": 50.0}  # every query picks candidate 0
    assert top_k(np.array([[0.5, 0.5, 0.7, 0.5]]), 3).tolist() == [[2, 0, 1]]


def test_duplicates_are_one_candidate_and_any_true_pair_is_a_hit():
    # two pairs share an image (equal pixels: one store path) and two share a caption text
    rs = RetrievalSet.of([("a dog", "x.png"), ("a cat", "x.png"), ("a dog", "y.png")])
    assert (rs.captions, rs.images) == (["a dog", "a cat"], ["x.png", "y.png"])
    assert truth_matrix(rs).tolist() == [[True, True], [True, False]]
    scores = np.array([[0.1, 0.9],   # "a dog": y first (a true pair)
                       [0.8, 0.2]])  # "a cat": x first (true)
    result = retrieve(scores, rs, ks=(1,))
    # images query captions: x -> "a cat" (true), y -> "a dog" (true); captions query images: both hit at 1
    assert result == {"text_r@1": 100.0, "image_r@1": 100.0}
    assert retrieve(scores[::-1].copy(), rs, ks=(1,))["image_r@1"] == 50.0  # "a cat" now ranks y first: a miss


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rows_per_block", [1, 4, 7, 100])  # 37 rows: blocks that do not divide it, and one block
def test_block_top_k_is_the_dense_stable_sort(seed, rows_per_block):
    rng = np.random.default_rng(seed)
    scores = tie_heavy(rng, (37, 23))
    for k in (1, 2, 5, 23, 30):
        got = blocked(scores, k, rows_per_block)
        assert np.array_equal(got, np.argsort(-scores, axis=1, kind="stable")[:, :min(k, 23)])
    pairs = [(f"c{c}", f"i{i}") for c, i in zip(rng.integers(0, 37, 40), rng.integers(0, 23, 40))]
    rs = RetrievalSet.of(pairs)
    order_c, order_i = [int(c[1:]) for c in rs.captions], [int(i[1:]) for i in rs.images]
    matrix = scores[np.ix_(order_c, order_i)]
    ks = (1, 3, 10, 40)
    expected = {**{f"text_r@{k}": v for k, v in dense_recall(matrix.T, truth_matrix(rs).T, ks).items()},
                **{f"image_r@{k}": v for k, v in dense_recall(matrix, truth_matrix(rs), ks).items()}}
    assert retrieve(matrix, rs, ks, rows_per_block) == expected


def test_no_queries_or_no_candidates_rank_nothing():
    assert ranking(lambda at: np.zeros((len(at), 3)), 0, 3, 5).shape == (0, 3)
    assert ranking(lambda at: np.zeros((len(at), 0)), 2, 0, 5).shape == (2, 0)
    assert recall_at_k(np.zeros((0, 1), dtype=bool), (1,)) == {1: 0.0}


def scored_by(matrix: np.ndarray, calls: list[int]):
    """A stand-in cross-encoder: the score of (caption c, image i) is matrix[c, i]; counts the pairs it scores."""
    def scores(captions: np.ndarray, images: np.ndarray) -> np.ndarray:
        calls.append(len(captions))
        return matrix[captions, images]
    return scores


@pytest.mark.parametrize("seed", range(4))
def test_reranking_every_candidate_is_the_dense_cross_encoder(seed):
    rng = np.random.default_rng(seed)
    cross, first = tie_heavy(rng, (9, 11)), rng.normal(size=(9, 11))  # captions × images
    firsts = [(blocked(first, 11, 2), True), (blocked(first.T.copy(), 9, 2), False)]
    calls = []
    by_caption, by_image = rerank(scored_by(cross, calls), firsts, images=11, k=11)
    assert np.array_equal(by_caption, np.argsort(-cross, axis=1, kind="stable"))
    assert np.array_equal(by_image, np.argsort(-cross.T, axis=1, kind="stable"))
    assert calls == [9 * 11]  # each pair once, though both directions hold it


def test_reranking_the_top_k_misses_what_the_first_stage_left_out():
    # 3 captions × 4 images, caption c's true image is c; the cross-encoder knows (diagonal), the first stage
    # ranks caption 0's true image last, so with k = 2 the cross-encoder never sees it
    cross = np.eye(3, 4)
    first = np.array([[0.1, 0.9, 0.8, 0.7],
                      [0.1, 0.9, 0.8, 0.7],
                      [0.1, 0.2, 0.9, 0.8]])
    calls = []
    (by_caption,) = rerank(scored_by(cross, calls), [(blocked(first, 4, 3), True)], images=4, k=2)
    # caption 0: candidates 1, 2 re-ranked (a tie at 0: column order), then 3, 0 in first-stage order
    assert by_caption.tolist() == [[1, 2, 3, 0], [1, 2, 3, 0], [2, 3, 1, 0]]
    rs = RetrievalSet.of([(f"c{j}", f"i{j}") for j in range(3)])
    hits = rs.hits(by_caption, by_caption=True)
    assert recall_at_k(hits, (1, 2, 4)) == pytest.approx({1: 200 / 3, 2: 200 / 3, 4: 100.0})
    assert calls == [3 * 2]
