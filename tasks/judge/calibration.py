"""The judge against the human validation: how far its verdict and each of its four questions agree with people, and
which thresholds would agree best (reported, never applied).

An image's label (`agreement.image_labels`) answers the two questions about that image: a question asks whether the
image shows its own caption's word (original_o, substitute_c) or the other caption's (substitute_o, original_c), and
people say yes when they chose that caption or "both". A pair has a human verdict when both its images are labelled:
it passes when both are "own" (`agreement.validated`). The judge's verdict is recomputed with `verdict.verdicts`
(yes when P(Yes) >= threshold), so any thresholds can be scored. Only judged and labelled pairs and images count;
"reject" is the positive class of precision and recall. Metrics are plain JSON types: scores rounded to 4 decimals,
None where undefined: no items, AUC when people give one answer, κ when either side does (κ is then 0 or 0/0 and
says nothing, so a threshold that answers every image alike is never the κ-best).
Thresholds are reported unrounded: they are P(Yes) values, and a rounded one could move an image across it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    confusion_matrix,
    precision_score,
    recall_score,
    roc_auc_score,
    roc_curve,
)

from tasks.core.schemas import JUDGE_QUESTIONS, Schema
from tasks.judge.verdict import verdicts
from tasks.validation.agreement import SOURCES, validated

ASKS = {"original_o": ("o", "own"), "substitute_c": ("c", "own"),  # question -> (image side, caption it asks about)
        "substitute_o": ("o", "other"), "original_c": ("c", "other")}
HUMAN_ANSWERS: Schema = {"caption_id": pl.String, "question": pl.String, "human": pl.Boolean}
HUMAN_PASS: Schema = {"caption_id": pl.String, "human_pass": pl.Boolean}
ROC: Schema = {"question": pl.String, "threshold": pl.Float64, "fpr": pl.Float64, "tpr": pl.Float64}
DIGITS = 4


def human_answers(labels: pl.DataFrame) -> pl.DataFrame:
    """`HUMAN_ANSWERS`: per labelled image its two questions, yes when its label is the caption asked about or both."""
    answers = [labels.filter(pl.col("side") == side).select(
        "caption_id", question=pl.lit(question), human=pl.col("label").is_in([caption, "both"]))
        for question, (side, caption) in ASKS.items()]
    return (pl.concat(answers).cast(HUMAN_ANSWERS)  # type: ignore[arg-type]  # polars: a Mapping's key is invariant
            .sort("caption_id", maintain_order=True))


def human_pass(labels: pl.DataFrame) -> pl.DataFrame:
    """`HUMAN_PASS`: per pair with both images labelled, whether both were labelled with their own caption."""
    both = labels.group_by("caption_id").agg(pl.col("side").n_unique()).filter(pl.col("side") == len(SOURCES["all"]))
    return both.select("caption_id", human_pass=pl.col("caption_id").is_in(validated(labels))) \
        .cast(HUMAN_PASS).sort("caption_id")  # type: ignore[arg-type]  # polars: a Mapping's key is invariant


def _score(value: float | None) -> float | None:
    return None if value is None or np.isnan(value) else round(float(value), DIGITS)


def kappa(people: np.ndarray, judge: np.ndarray) -> float | None:
    """Cohen's κ of two boolean arrays, unrounded; None unless both answer both ways."""
    if len(set(people.tolist())) < 2 or len(set(judge.tolist())) < 2:
        return None
    return float(cohen_kappa_score(people, judge, labels=[False, True]))


def verdict_agreement(people: np.ndarray, judge: np.ndarray) -> dict:
    """Pair-level agreement of the judge's pass (`judge`) with people's (`people`), two boolean arrays."""
    empty = not people.size
    counts = np.zeros((2, 2), dtype=int) if empty else confusion_matrix(people, judge, labels=[False, True])
    (both_reject, judge_pass_people_reject), (judge_reject_people_pass, both_pass) = counts.tolist()
    return {
        "accuracy": None if empty else _score(accuracy_score(people, judge)),
        "cohen_kappa": _score(kappa(people, judge)),
        "reject_precision": None if empty else _score(precision_score(~people, ~judge, zero_division=np.nan)),
        "reject_recall": None if empty else _score(recall_score(~people, ~judge, zero_division=np.nan)),
        "confusion": {"both_pass": both_pass, "both_reject": both_reject,
                      "judge_pass_people_reject": judge_pass_people_reject,
                      "judge_reject_people_pass": judge_reject_people_pass},
    }


def above_all(p_yes: np.ndarray) -> float:
    """The next 4-decimal value above every P(Yes): a threshold no image reaches."""
    return (np.floor(p_yes.max() * 10**DIGITS) + 1) / 10**DIGITS


def kappa_sweep(people: np.ndarray, p_yes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(thresholds, κ) at every distinct P(Yes) where the judge answers both ways, people answering both ways. The
    confusion counts come from one `roc_curve` (yes when P(Yes) >= threshold, as `verdicts`), κ from its binary closed
    form: a `cohen_kappa_score` call per threshold would be quadratic in the images."""
    fpr, tpr, thresholds = roc_curve(people, p_yes, drop_intermediate=False)
    positives, negatives = int(people.sum()), int((~people).sum())
    tp, fp = np.rint(tpr * positives), np.rint(fpr * negatives)
    fn, tn = positives - tp, negatives - fp
    both_ways = (tp + fp > 0) & (fn + tn > 0)
    kappas = 2 * (tp * tn - fp * fn) / ((tp + fp) * (fp + tn) + (tp + fn) * (fn + tn))
    return thresholds[both_ways], kappas[both_ways]


def best_threshold(people: np.ndarray, p_yes: np.ndarray, configured: float) -> tuple[float | None, float | None]:
    """(threshold, κ) maximising κ over the distinct P(Yes); ties go to the one closest to `configured`, then the
    smaller. (None, None) where κ is undefined at every one (people or the judge answer one way)."""
    if len(set(people.tolist())) < 2:
        return None, None
    thresholds, kappas = kappa_sweep(people, p_yes)
    if not thresholds.size:
        return None, None
    best = np.isclose(kappas, kappas.max(), rtol=0, atol=1e-12)
    threshold = min(thresholds[best].tolist(), key=lambda t: (abs(t - configured), t))
    return threshold, float(kappas.max())


def compared_answers(judged: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """caption_id, question, human, p_yes: every question the judge asked about a labelled image (an insert asks
    nothing about the original, a delete nothing about the substitute: their P(Yes) is null)."""
    p_yes = judged.unpivot([f"judge_{q}" for q in JUDGE_QUESTIONS], index="caption_id", variable_name="question",
                           value_name="p_yes").drop_nulls("p_yes").with_columns(
        pl.col("question").str.strip_prefix("judge_"))
    return human_answers(labels).join(p_yes, on=["caption_id", "question"])


def question_agreement(answers: pl.DataFrame, thresholds: Mapping[str, float]) -> dict[str, dict]:
    """Per question (`JUDGE_QUESTIONS` order): images, auc, kappa at its threshold, threshold, best_threshold,
    best_kappa."""
    results = {}
    for question in JUDGE_QUESTIONS:
        asked = answers.filter(pl.col("question") == question)
        people, p_yes = asked["human"].to_numpy(), asked["p_yes"].to_numpy()
        best, best_kappa = best_threshold(people, p_yes, thresholds[question])
        results[question] = {
            "images": asked.height,
            "auc": _score(roc_auc_score(people, p_yes)) if len(set(people.tolist())) == 2 else None,
            "kappa": _score(kappa(people, p_yes >= thresholds[question])), "threshold": float(thresholds[question]),
            "best_threshold": best, "best_kappa": _score(best_kappa)}
    return results


def roc_points(answers: pl.DataFrame) -> pl.DataFrame:
    """`ROC` for `dvc plots`: per question whose images people answered both ways, roc_curve's points; its infinite
    first threshold (nothing answered yes) becomes `above_all`."""
    frames = []
    for question in JUDGE_QUESTIONS:
        asked = answers.filter(pl.col("question") == question)
        people, p_yes = asked["human"].to_numpy(), asked["p_yes"].to_numpy()
        if len(set(people.tolist())) < 2:
            continue
        fpr, tpr, thresholds = roc_curve(people, p_yes)
        thresholds[np.isinf(thresholds)] = above_all(p_yes)
        frames.append(pl.DataFrame({"question": question, "threshold": thresholds, "fpr": fpr, "tpr": tpr},
                                   schema=ROC))
    return pl.concat(frames) if frames else pl.DataFrame(schema=ROC)


def calibrate(judged: pl.DataFrame, labels: pl.DataFrame, thresholds: Mapping[str, float]) -> tuple[dict, pl.DataFrame]:
    """(metrics, roc) of the judge's P(Yes) (`judged`: caption_id and a `judge_<question>` column per question)
    against people's `labels` (`agreement.image_labels`), the verdict at `thresholds` (question -> threshold)."""
    answers = compared_answers(judged, labels)
    questions = question_agreement(answers, thresholds)
    best = {q: float(thresholds[q]) if r["best_threshold"] is None else r["best_threshold"]
            for q, r in questions.items()}
    people = human_pass(labels)

    def judge_pass(at: Mapping[str, float]) -> pl.DataFrame:
        return verdicts(judged, at).join(people, on="caption_id")

    pairs, at_best = judge_pass(thresholds), judge_pass(best)
    metrics = {
        "pairs_compared": pairs.height,
        "images_compared": labels.join(judged.select("caption_id"), on="caption_id", how="semi").height,
        **verdict_agreement(pairs["human_pass"].to_numpy(), pairs["judge_pass"].to_numpy()),
        "questions": questions, "best_thresholds": best,
        "kappa_at_best_thresholds": _score(kappa(at_best["human_pass"].to_numpy(), at_best["judge_pass"].to_numpy())),
    }
    return metrics, roc_points(answers)
