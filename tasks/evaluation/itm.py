"""Image-text matching score differences (paper Fig. 3) for each pair j, with s a model's matching score:

    Δimg_r = s(C_r, I_r) − s(C_r, I_o)      Δtxt_r = s(C_r, I_r) − s(C_o, I_r)
    Δimg_c = s(C_c, I_c) − s(C_c, I_o)      Δtxt_c = s(C_c, I_c) − s(C_o, I_c)

(C_r, I_r) is another pair drawn per j with a seeded generator, its image different from j's; the `_r` pair uses the
reference image of each pair (a real COCO image when configured, else the generated I_o), the `_c` pair the
generated I_o and I_c. A positive Δ means the model prefers the matching caption (image); the share of Δ < 0 is the
share of pairs it gets wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import polars as pl

from tasks.core.schemas import ITM_DELTAS as DELTAS
from tasks.evaluation.scorers import Images, PairScorer


def random_others(image_keys: Sequence[str], seed: int) -> list[int | None]:
    """Per pair j, the index r of another pair whose image key differs from j's (None when there is none)."""
    rng = np.random.default_rng(seed)
    keys = np.asarray(image_keys, dtype=object)
    others = []
    for key in keys:
        candidates = np.flatnonzero(keys != key)
        others.append(int(rng.choice(candidates)) if len(candidates) else None)
    return others


def deltas(caption: Sequence[str], counterfactual: Sequence[str], reference: Images, image_o: Images,
           image_c: Images, scorer: PairScorer, seed: int) -> pl.DataFrame:
    """The four Δ per pair (rows in input order); the `_r` deltas are null for a pair without another image."""
    if not caption:
        return pl.DataFrame(schema=dict.fromkeys(DELTAS, pl.Float64))
    other = random_others(reference.keys, seed)
    r = [k if k is not None else j for j, k in enumerate(other)]  # placeholders, nulled below
    s_rr = scorer.pairs([caption[k] for k in r], reference.take(r))
    s_ro = scorer.pairs([caption[k] for k in r], reference)
    s_or = scorer.pairs(list(caption), reference.take(r))
    s_cc = scorer.pairs(list(counterfactual), image_c)
    s_co = scorer.pairs(list(counterfactual), image_o)
    s_oc = scorer.pairs(list(caption), image_c)
    has_other = pl.Series([k is not None for k in other], dtype=pl.Boolean)
    frame = pl.DataFrame({"delta_img_r": s_rr - s_ro, "delta_txt_r": s_rr - s_or, "delta_img_c": s_cc - s_co,
                          "delta_txt_c": s_cc - s_oc}, schema=dict.fromkeys(DELTAS, pl.Float64))
    return frame.with_columns(pl.when(has_other).then(pl.col(c)) for c in ("delta_img_r", "delta_txt_r"))


def summary(frame: pl.DataFrame) -> dict[str, dict[str, float | None]]:
    """Per Δ: its mean and the share of pairs with Δ < 0 (nulls skipped; None when nothing to average)."""
    out = {}
    for name in DELTAS:
        values = frame[name].drop_nulls()
        out[name] = {"mean": float(cast(float, values.mean())) if len(values) else None,
                     "share_negative": float(cast(float, (values < 0).mean())) if len(values) else None}
    return out
