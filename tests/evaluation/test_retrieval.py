"""R@k on a hand-computed 4×4 case (2 pairs: C_o1, C_c1, C_o2, C_c2 × I_o1, I_c1, I_o2, I_c2), ties, duplicates."""

from __future__ import annotations

import numpy as np

from tasks.evaluation.retrieval import RetrievalSet, recall_at_k, retrieval

PAIRS = [("C_o1", "I_o1"), ("C_c1", "I_c1"), ("C_o2", "I_o2"), ("C_c2", "I_c2")]
SCORES = np.array([[0.9, 0.8, 0.1, 0.0],   # C_o1
                   [0.7, 0.6, 0.2, 0.3],   # C_c1
                   [0.1, 0.2, 0.5, 0.5],   # C_o2 (tie: I_o2 comes first)
                   [0.0, 0.1, 0.5, 0.4]])  # C_c2


def test_hand_computed_recall_in_both_directions():
    # text retrieval (an image ranks captions, by column): I_o1 -> C_o1 hit; I_c1 -> C_o1 miss, then C_c1;
    # I_o2 -> tie C_o2/C_c2, C_o2 first: hit; I_c2 -> C_o2 miss, then C_c2. Image retrieval mirrors it by rows.
    result = retrieval(SCORES, RetrievalSet.of(PAIRS), ks=(1, 2, 4))
    assert result == {"text_r@1": 50.0, "text_r@2": 100.0, "text_r@4": 100.0,
                      "image_r@1": 50.0, "image_r@2": 100.0, "image_r@4": 100.0}


def test_ties_keep_candidate_order():
    truth = np.array([[False, True], [True, False]])
    assert recall_at_k(np.array([[0.5, 0.5], [0.5, 0.5]]), truth, ks=(1,)) == {1: 50.0}  # row 0 picks column 0
    assert recall_at_k(np.array([[0.5, 0.6], [0.5, 0.4]]), truth, ks=(1,)) == {1: 100.0}


def test_duplicates_are_one_candidate_and_any_true_pair_is_a_hit():
    # two pairs share an image (equal pixels: one store path) and two share a caption text
    rs = RetrievalSet.of([("a dog", "x.png"), ("a cat", "x.png"), ("a dog", "y.png")])
    assert (rs.captions, rs.images) == (["a dog", "a cat"], ["x.png", "y.png"])
    assert rs.truth_matrix().tolist() == [[True, True], [True, False]]
    scores = np.array([[0.1, 0.9],   # "a dog": y first (a true pair)
                       [0.8, 0.2]])  # "a cat": x first (true)
    result = retrieval(scores, rs, ks=(1,))
    # images query captions: x -> "a cat" (true), y -> "a dog" (true); captions query images: both hit at 1
    assert result == {"text_r@1": 100.0, "image_r@1": 100.0}
    assert retrieval(scores[::-1].copy(), rs, ks=(1,))["image_r@1"] == 50.0  # "a cat" now ranks y first: a miss
