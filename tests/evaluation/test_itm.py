"""ITM score differences: the four Δ equal the direct score differences, for a bi- and a cross-encoder."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.evaluation import itm
from tasks.evaluation.scorers import BiEncoder, Images, load_scorer
from tests.evaluation.fixtures import CAPTIONS

pytest_plugins = ["tests.evaluation.fixtures"]


def images(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"{seed}-{j}": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for j in range(n)}


@pytest.mark.parametrize("family", ["clip", "hf_clip", "vilt", "bridgetower"])
def test_deltas_are_the_direct_score_differences(eval_specs, family):
    scorer = load_scorer(eval_specs[family], batch_size=2)
    c_o, c_c = CAPTIONS[0::2], CAPTIONS[1::2]
    pixels = images(3, 0) | images(3, 1) | images(3, 2)  # read from memory by key
    every = Images(tuple(pixels), pixels.__getitem__)
    reference, i_o, i_c = (every.take(range(n, n + 3)) for n in (0, 3, 6))
    # a bi-encoder embeds every caption and image once, up front; a cross-encoder scores pairs as they come
    model = scorer.embed(CAPTIONS, every) if isinstance(scorer, BiEncoder) else scorer
    frame = itm.deltas(c_o, c_c, reference, i_o, i_c, model, seed=7)
    other = itm.random_others(reference.keys, seed=7)
    for j, r in enumerate(other):
        assert r != j

        def s(caption: str, image: Images, at: int) -> float:
            """The score of one pair, computed alone (a bi-encoder embeds just these two)."""
            one = image.take([at])
            alone = scorer.embed([caption], one) if isinstance(scorer, BiEncoder) else scorer
            return float(alone.pairs([caption], one)[0])

        row = frame.row(j, named=True)
        assert row["delta_img_r"] == pytest.approx(s(c_o[r], reference, r) - s(c_o[r], reference, j), abs=1e-4)
        assert row["delta_txt_r"] == pytest.approx(s(c_o[r], reference, r) - s(c_o[j], reference, r), abs=1e-4)
        assert row["delta_img_c"] == pytest.approx(s(c_c[j], i_c, j) - s(c_c[j], i_o, j), abs=1e-4)
        assert row["delta_txt_c"] == pytest.approx(s(c_c[j], i_c, j) - s(c_o[j], i_c, j), abs=1e-4)


def test_the_other_pair_is_seeded_and_never_shares_the_image():
    keys = ["a", "a", "b", "c", "c"]
    first = itm.random_others(keys, seed=3)
    assert first == itm.random_others(keys, seed=3)
    assert all(keys[r] != keys[j] for j, r in enumerate(first))
    assert itm.random_others(["a", "a"], seed=0) == [None, None]


def test_summary_counts_negative_shares_and_skips_nulls():
    import polars as pl

    frame = pl.DataFrame({"delta_img_r": [1.0, -1.0, None], "delta_txt_r": [None, None, None],
                          "delta_img_c": [-2.0, -1.0, 3.0], "delta_txt_c": [0.0, 0.0, 0.0]},
                         schema=dict.fromkeys(itm.DELTAS, pl.Float64))
    result = itm.summary(frame)
    assert result["delta_img_r"] == {"mean": 0.0, "share_negative": 0.5}
    assert result["delta_txt_r"] == {"mean": None, "share_negative": None}
    assert result["delta_img_c"] == {"mean": 0.0, "share_negative": pytest.approx(2 / 3)}
    assert result["delta_txt_c"]["share_negative"] == 0.0
