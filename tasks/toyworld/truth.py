"""Ground truth of a run on the toy world: how many of its pairs are real counterfactuals, read by `checker`.

Per generated sample (re-rendered from its seed, p2p fraction and guidance scale, as generate rendered it) and per
selected pair (its exported PNGs): `accurate` — I_o shows C_o and I_c shows C_c; `minimal` — accurate, and
everything the two captions share is the same in both images (`checker.minimal`). Each sample is rendered a second
time without attention sharing (p2p fraction 0, same seed and scale) for `p2p_gain`. A caption that is no world
caption (`world.parse` is None) is shown by no image: a C_c the text stages broke counts as inaccurate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np
import polars as pl
from sklearn.metrics import cohen_kappa_score

from tasks.image.params import GenerateParams
from tasks.image.sampling import Diffusion, Sample, encode_prompts, render
from tasks.toyworld import checker, world

TRUTH: dict = {"caption_id": pl.String, "sample": pl.Int64, "edit_type": pl.String, "accurate": pl.Boolean,
               "minimal": pl.Boolean, "accurate_no_p2p": pl.Boolean, "minimal_no_p2p": pl.Boolean}
SELECTED_TRUTH: dict = {"caption_id": pl.String, "edit_type": pl.String, "accurate": pl.Boolean, "minimal": pl.Boolean}


def judge_pair(image_o: np.ndarray, image_c: np.ndarray, caption: str, counterfactual: str) -> tuple[bool, bool]:
    """(accurate, minimal) of one pair."""
    spec_o, spec_c = world.parse(caption), world.parse(counterfactual)
    accurate = checker.shows(image_o, spec_o) and checker.shows(image_c, spec_c)
    return accurate, accurate and checker.minimal(image_o, image_c, spec_o, spec_c)


def pair_truth(pair: pl.DataFrame, diffusion: Diffusion, params: GenerateParams) -> list[dict]:
    """`TRUTH` rows of one pair's samples (rows of schemas.SAMPLES), each rendered as generate rendered it (seed,
    p2p fraction, guidance scale; `batch_samples` per UNet call) and again with p2p fraction 0."""
    first = pair.row(0, named=True)
    caption, counterfactual = first["caption"], first["counterfactual"]
    prompts = encode_prompts(diffusion, caption, counterfactual)
    planned = [Sample(*s) for s in zip(pair["seed"], pair["p2p_fraction"], pair["guidance_scale"])]

    def images(samples: list[Sample]) -> np.ndarray:
        return np.concatenate([render(diffusion, prompts, samples[i:i + params.batch_samples], params.steps,
                                      params.size).images for i in range(0, len(samples), params.batch_samples)])

    shared, alone = images(planned), images([replace(s, p2p_fraction=0.0) for s in planned])
    rows = []
    for i, index in enumerate(pair["sample"]):
        accurate, minimal = judge_pair(*shared[i], caption, counterfactual)
        accurate_alone, minimal_alone = judge_pair(*alone[i], caption, counterfactual)
        rows.append({"caption_id": first["caption_id"], "sample": index, "edit_type": first["edit_type"],
                     "accurate": accurate, "minimal": minimal, "accurate_no_p2p": accurate_alone,
                     "minimal_no_p2p": minimal_alone})
    return rows


def _share(values: pl.Series) -> float | None:
    return None if values.is_empty() else round(float(values.cast(pl.Float64).mean()), 4)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 4)


def _kappa(a: pl.Series, b: pl.Series) -> float | None:
    """Cohen's κ of two boolean series (sklearn's, as the judge's calibration); None when empty or undefined (both
    one same constant)."""
    if a.is_empty():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        value = cohen_kappa_score(a.to_numpy(), b.to_numpy(), labels=[False, True])
    return None if np.isnan(value) else round(float(value), 4)


def _group(samples: pl.DataFrame, selected: pl.DataFrame) -> dict:
    """The headline metrics of one group; `p2p_gain` is minimality with sharing minus without, each among its own
    accurate samples."""
    accuracy = {"samples": _share(samples["accurate"]), "selected": _share(selected["accurate"])}
    minimality = {"samples": _share(samples.filter("accurate")["minimal"]),
                  "selected": _share(selected.filter("accurate")["minimal"])}
    without = _share(samples.filter("accurate_no_p2p")["minimal_no_p2p"])
    return {
        "samples": samples.height, "selected_pairs": selected.height, "pair_accuracy": accuracy,
        "minimality": minimality,
        "p2p_gain": None if minimality["samples"] is None or without is None else round(
            minimality["samples"] - without, 4),
        "filter_lift": _ratio(accuracy["selected"], accuracy["samples"]),
    }


def _check(passed: pl.Series, accurate: pl.Series) -> dict:
    """A filter's pass/fail against truth: its lift (accuracy of what it passes ÷ of all), accuracy and κ."""
    return {"rows": passed.len(), "lift": _ratio(_share(accurate.filter(passed)), _share(accurate)),
            "accuracy": _share(passed == accurate), "kappa": _kappa(passed, accurate)}


def metrics(samples: pl.DataFrame, selected: pl.DataFrame, subjects_pass: pl.DataFrame,
            judged: pl.DataFrame | None) -> dict:
    """truth.json: the headline keys over every edit type, `by_edit_type`, and the both-subjects check's and the
    judge's agreement with truth. `selected` holds (caption_id, edit_type, accurate, minimal) per selected pair,
    `subjects_pass` (caption_id, sample, subjects_pass) per sample the check applies to, `judged` (caption_id,
    judge_pass) or None when the judge did not run."""
    out = _group(samples, selected)
    out["by_edit_type"] = {t: _group(samples.filter(pl.col("edit_type") == t), selected.filter(
        pl.col("edit_type") == t)) for t in sorted(set(samples["edit_type"]))}
    checked = subjects_pass.join(samples, on=["caption_id", "sample"])
    out["both_subjects_check"] = _check(checked["subjects_pass"], checked["accurate"])
    out["judge"] = None
    if judged is not None:
        both = judged.join(selected, on="caption_id")
        out["judge"] = _check(both["judge_pass"], both["accurate"])
    return out


def selected_truth(selected: pl.DataFrame, load: Callable[[str], np.ndarray]) -> pl.DataFrame:
    """(caption_id, edit_type, accurate, minimal) of every selected pair, from its PNGs (`load(name)`)."""
    rows: Iterator[tuple] = (
        (r["caption_id"], r["edit_type"], *judge_pair(load(r["image_o"]), load(r["image_c"]), r["caption"],
                                                      r["counterfactual"]))
        for r in selected.iter_rows(named=True))
    return pl.DataFrame(list(rows), schema=SELECTED_TRUTH, orient="row")
