import numpy as np
import pytest

from tasks.evaluation.odmap import od_map, relevance


def test_relevance_excludes_removed_and_needs_a_present_class():
    gallery = [{"dog"}, {"dog", "cat"}, {"cat"}, set(), {"dog", "car"}]
    rel = relevance([{"cat"}], [{"dog", "car"}], gallery)
    assert rel.tolist() == [[True, False, False, False, True]]
    rel_all = relevance([{"cat"}], [{"dog", "car"}], gallery, "all")
    assert rel_all.tolist() == [[False, False, False, False, True]]


def test_odmap_hand_computed():
    # query 0 ranks gallery as 2, 0, 1, 3 (scores), relevant = {0, 3}: hits 0,1,0,0
    # query 1 ranks 0, 1, 2, 3 (a tie between 1 and 2 keeps gallery order), relevant = {0, 2}: hits 1,0,1,0
    scores = np.array([[0.5, 0.1, 0.9, 0.0], [0.9, 0.5, 0.5, 0.1]])
    relevant = np.array([[True, False, False, True], [True, False, True, False]])
    got = od_map(scores, relevant, ks=(1, 2, 3))
    # AP@1: q0 0, q1 1·1/1 -> mean 0.5
    # AP@2: q0 (0 + 1·1/2)/2 = 0.25, q1 (1 + 0)/2 = 0.5 -> 0.375
    # AP@3: q0 (1/2)/3 = 1/6, q1 (1 + 2/3)/3 = 5/9 -> (1/6 + 5/9)/2 = 13/36
    assert got == pytest.approx({"odmap@1": 50.0, "odmap@2": 37.5, "odmap@3": 100 * 13 / 36})


def test_odmap_without_queries_is_zero():
    assert od_map(np.zeros((0, 3)), np.zeros((0, 3), dtype=bool), (1,)) == {"odmap@1": 0.0}
