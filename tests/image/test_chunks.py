"""Generate's cut into tasks: at paper scale (17k pairs, 8 per task) the longest task is at most twice the mean, where
the content-defined chunks it replaces put up to 10x the mean on one GPU."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tasks.image.chunks import sample_cut

PAIRS, PER_TASK = 17_000, 8


def task_samples(cut: list[range], samples: list[int]) -> np.ndarray:
    return np.array([sum(samples[i] for i in run) for run in cut])


@pytest.mark.parametrize("varied", [False, True])
def test_no_task_is_longer_than_twice_the_mean(varied):
    rng = random.Random(0)
    samples = [rng.randint(10, 100) if varied else 100 for _ in range(PAIRS)]  # varied: adaptive's 1 to 10 rounds
    cut = sample_cut(samples, PER_TASK)
    assert sorted(i for run in cut for i in run) == list(range(PAIRS))  # every pair once
    assert all(run.step == 1 and len(run) for run in cut)  # contiguous, none empty
    sizes = task_samples(cut, samples)
    assert len(cut) == PAIRS // PER_TASK and list(sizes) == sorted(sizes, reverse=True)  # heaviest first
    assert sizes.max() <= 2 * sizes.mean()
    if not varied:
        assert set(sizes) == {PER_TASK * 100}
    print(f"sample_cut ({'varied' if varied else 'uniform'}): max/mean {sizes.max() / sizes.mean():.2f}")


def test_a_few_pairs_make_no_empty_task():
    assert sample_cut([], 8) == []
    assert sample_cut([4, 4, 4], 8) == [range(0, 3)]
    assert sample_cut([4] * 5, 2) == [range(0, 2), range(2, 4), range(4, 5)]
    assert sample_cut([1, 100, 1, 1], 1) == [range(0, 2), range(2, 4)]  # shares 26, 52 and 78 all end at pair 1
