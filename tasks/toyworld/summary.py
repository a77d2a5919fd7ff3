"""truth.json: a run's truth frames (`schemas.TRUTH_SAMPLES`, `schemas.TRUTH`) summed into rates that cannot be fooled.

Every rate is `stats.rate` (its count, total and Wilson 95% interval); `p2p_gain` and `filter_lift` are paired, with
an interval that resamples caption pairs (`stats.by_pair`). Beside the pair-level headline (`pair_accuracy`):
per-image accuracy by GenEval's task families, read from each image's own caption (`FAMILIES`, with their macro
mean), the four parts of a pair, the checker's failure reasons, and which sample each selection ranking key would
have picked (`selection_keys`), and with how many samples per pair (`samples_per_pair`).
"""

from __future__ import annotations

from typing import cast

import numpy as np
import polars as pl
from sklearn.metrics import cohen_kappa_score

from tasks.core.schemas import TRUTH_PARTS
from tasks.image.params import RANK_KEYS, SelectionParams
from tasks.image.thresholds import ranked
from tasks.toyworld import world
from tasks.toyworld.stats import by_pair, rate

FAMILIES = {  # GenEval's task families, as the toy world's captions state them
    "single_object": lambda s: len(s.phrases) == 1 and s.phrases[0].count == 1,
    "two_objects": lambda s: len(s.phrases) == 2,
    "counting": lambda s: any(p.count > 1 for p in s.phrases),
    "colours": lambda s: len(s.phrases) == 1 and s.phrases[0].colour is not None,
    "position": lambda s: s.relation is not None,
    "attribute_binding": lambda s: len(s.phrases) == 2 and all(p.colour for p in s.phrases),
}


def _images(samples: pl.DataFrame) -> pl.DataFrame:
    """(caption, shown, reason) of each image of `samples`: I_o against C_o, I_c against C_c."""
    return pl.concat([samples.select(caption="caption", shown="o_shows_o", reason="reason_o"),
                      samples.select(caption="counterfactual", shown="c_shows_c", reason="reason_c")])


def image_accuracy(samples: pl.DataFrame) -> dict:
    """Per-image accuracy overall and per family (an image counts in each family its caption belongs to; an image
    of no world caption in none), their macro mean, and the failure reasons' counts."""
    images = _images(samples)
    specs = {c: world.parse(c) for c in images["caption"].unique()}
    families = {name: rate(images.filter(pl.col("caption").is_in(
        [c for c, s in specs.items() if s is not None and test(s)]))["shown"]) for name, test in FAMILIES.items()}
    measured = [f["rate"] for f in families.values() if f["rate"] is not None]
    reasons = images["reason"].drop_nulls().value_counts(sort=True)
    return {"all": rate(images["shown"]), "families": families,
            "macro": round(sum(measured) / len(measured), 4) if measured else None,
            "failures": dict(zip(reasons["reason"], reasons["count"]))}


def _lift(t: dict) -> float | None:
    return None if not t["selected"] or not t["samples"] or not t["accurate"] else \
        (t["selected_accurate"] / t["selected"]) / (t["accurate"] / t["samples"])


def _gain(t: dict) -> float | None:
    return (t["good"] - t["good_no_p2p"]) / t["samples"] if t["samples"] else None


def group(samples: pl.DataFrame, selected: pl.DataFrame) -> dict:
    """The headline metrics of one group of samples and their selected pairs. `p2p_gain`: the share of samples that
    are real counterfactuals (accurate and minimal) with attention sharing minus without, same seeds."""
    good, good_alone = pl.col("accurate") & pl.col("minimal"), pl.col("accurate_no_p2p") & pl.col("minimal_no_p2p")
    per_pair = samples.group_by("caption_id").agg(
        samples=pl.len(), accurate=pl.col("accurate").sum(), good=good.sum(), good_no_p2p=good_alone.sum()).join(
        selected.group_by("caption_id").agg(selected=pl.len(), selected_accurate=pl.col("accurate").sum()),
        on="caption_id", how="full", coalesce=True).fill_null(0).sort("caption_id").drop("caption_id")
    # sorted: the bootstrap draws rows by index, so the same run gives the same interval
    return {
        "samples": samples.height, "selected_pairs": selected.height,
        "pair_accuracy": {"samples": rate(samples["accurate"]), "selected": rate(selected["accurate"])},
        "minimality": {"samples": rate(samples.filter("accurate")["minimal"]),
                       "selected": rate(selected.filter("accurate")["minimal"])},
        "p2p_gain": by_pair(per_pair.select("samples", "good", "good_no_p2p"), _gain)
        | {"better": samples.filter(good & ~good_alone).height, "worse": samples.filter(~good & good_alone).height},
        "filter_lift": by_pair(per_pair, _lift),
        "parts": {part: rate(samples[part]) for part in TRUTH_PARTS},
        "no_world_caption": samples.filter(pl.col("reason_c") == "no_world_caption")["caption_id"].n_unique(),
    }


def _check(passed: pl.Series, accurate: pl.Series) -> dict:
    """A filter's pass/fail against truth: its lift (accuracy of what it passes ÷ of all), accuracy and Cohen's κ
    (sklearn's, as the judge's calibration; None when empty or undefined: both one same constant)."""
    shares = cast(tuple[float | None, float | None], (accurate.filter(passed).mean(), accurate.mean()))
    kappa = None
    if passed.len():
        with np.errstate(divide="ignore", invalid="ignore"):
            value = cohen_kappa_score(passed.to_numpy(), accurate.to_numpy(), labels=[False, True])
        kappa = None if np.isnan(value) else round(float(value), 4)
    return {"rows": passed.len(), "lift": round(shares[0] / shares[1], 4) if shares[0] is not None and shares[1]
            else None, "accuracy": rate(passed == accurate), "kappa": kappa}


def picked(scores: pl.DataFrame, samples: pl.DataFrame, params: SelectionParams) -> dict:
    """Truth of the sample each ranking key ranks first among a pair's passing ones (`selection_keys`), and with
    the configured key among the first k samples of each pair (`samples_per_pair`, k = 1, 2, 4, ..., all)."""
    def first(scored: pl.DataFrame, key: str) -> pl.Series:
        top = ranked(scored, params.model_copy(update={"rank_by": key})).filter(pl.col("rank") == 0)
        return top.join(samples, on=["caption_id", "sample"])["accurate"]

    most = int(cast(int | None, scores["sample"].max()) or 0) + 1
    counts = sorted({min(2 ** i, most) for i in range(most.bit_length() + 1)})
    return {"selection_keys": {key: rate(first(scores, key)) for key in RANK_KEYS},
            "samples_per_pair": {str(k): rate(first(scores.filter(pl.col("sample") < k), params.rank_by))
                                 for k in counts}}


def metrics(samples: pl.DataFrame, selected: pl.DataFrame, subjects_pass: pl.DataFrame,
            judged: pl.DataFrame | None, scores: pl.DataFrame, params: SelectionParams) -> dict:
    """truth.json's facts: `group` over every edit type and `by_edit_type`, per-image accuracy, which sample each
    ranking key picks, and the both-subjects check's and the judge's agreement with truth. `subjects_pass`: (caption_id,
    sample, subjects_pass) per sample the check applies to; `judged`: (caption_id, judge_pass) or None (no judge);
    `scores`: generate's samples table."""
    out = group(samples, selected) | {"image_accuracy": image_accuracy(samples)} | picked(scores, samples, params)
    out["by_edit_type"] = {t: group(samples.filter(pl.col("edit_type") == t), selected.filter(
        pl.col("edit_type") == t)) | {"image_accuracy": image_accuracy(samples.filter(pl.col("edit_type") == t))}
        for t in sorted(set(samples["edit_type"]))}
    checked = subjects_pass.join(samples, on=["caption_id", "sample"])
    out["both_subjects_check"] = _check(checked["subjects_pass"], checked["accurate"])
    both = None if judged is None else judged.join(selected, on="caption_id")
    out["judge"] = None if both is None else _check(both["judge_pass"], both["accurate"])
    return out
