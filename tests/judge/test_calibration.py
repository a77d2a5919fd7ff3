"""Judge calibration against hand computations, on Label Studio exports read the real way (`read_export`,
`image_labels`): the human answer per label, pair-level κ and reject precision / recall, the threshold boundary, the
κ-best threshold and its tie rule, ROC and AUC, and no labels at all."""

from __future__ import annotations

import io
import json

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import cohen_kappa_score

from tasks.core.schemas import JUDGE_QUESTIONS, JUDGED
from tasks.judge import calibration as cal
from tasks.release import figures
from tasks.validation import agreement as ag
from tasks.validation import labelstudio as ls
from tests.validation.test_labelstudio import annotation, export_task

CHOICE = {"own": "caption A", "other": "caption B", "both": "both", "neither": "neither"}  # tasks with own = "A"
THRESHOLDS = dict.fromkeys(JUDGE_QUESTIONS, 0.5)
PASS = (0.9, 0.8, 0.1, 0.2)  # P(Yes) in JUDGE_QUESTIONS order: original_o, substitute_c, substitute_o, original_c
SUBSTITUTE_MISSING, ORIGINAL_IN_C = (0.9, 0.3, 0.1, 0.2), (0.9, 0.8, 0.1, 0.7)


def labelled(tmp_path, pairs: dict[str, tuple[str | None, str | None]]) -> pl.DataFrame:
    """`image_labels` of an export file where each pair's I_o and I_c got one rating (None: no task rated)."""
    export = [export_task(caption_id, side, "A", annotation(CHOICE[label], 1))
              for caption_id, labels in pairs.items() for side, label in zip("oc", labels) if label]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    return ag.image_labels(ls.read_export(path))


def judged(pairs: dict[str, tuple[float, ...]]) -> pl.DataFrame:
    """JUDGED rows with these P(Yes) and a stale judge_pass = True that calibrate must not trust."""
    rows = [{"caption_id": caption_id, **{f"judge_{q}": p for q, p in zip(JUDGE_QUESTIONS, p_yes)},
             "judge_pass": True} for caption_id, p_yes in pairs.items()]
    return pl.DataFrame(rows, schema=JUDGED)


def test_each_label_answers_the_two_questions_about_its_image(tmp_path):
    labels = labelled(tmp_path, {"a": ("own", "own"), "b": ("other", "other"), "c": ("both", "both"),
                                 "d": ("neither", "neither"), "e": ("own", None)})
    answers = {(c, q): human for c, q, human in cal.human_answers(labels).iter_rows()}
    expected = {  # (original_o, substitute_o) from I_o's label, (substitute_c, original_c) from I_c's
        "a": (True, False, True, False), "b": (False, True, False, True), "c": (True, True, True, True),
        "d": (False, False, False, False), "e": (True, False, None, None)}
    questions = ("original_o", "substitute_o", "substitute_c", "original_c")
    assert answers == {(c, q): yes for c, row in expected.items() for q, yes in zip(questions, row) if yes is not None}
    assert cal.human_pass(labels).rows() == [("a", True), ("b", False), ("c", False), ("d", False)]  # e: half rated


def test_pair_agreement_on_a_hand_made_export(tmp_path):
    rated = {f"pp{i}": ("own", "own") for i in range(5)}                       # people pass, judge passes: 5
    rated |= {"pr0": ("own", "other"), "pr1": ("both", "own")}                 # people reject, judge passes: 2
    rated |= {"rp0": ("own", "own")}                                           # people pass, judge rejects: 1
    rated |= {"rr0": ("neither", "own"), "rr1": ("other", "other"), "rr2": ("own", "both"), "rr3": ("own", "neither")}
    rated |= {"half": ("own", None), "unjudged": ("own", "own")}               # no pair verdict / not judged
    p_yes = {c: PASS for c in rated if c[:2] in ("pp", "pr") or c == "half"}
    p_yes |= {"rp0": SUBSTITUTE_MISSING, "rr0": SUBSTITUTE_MISSING, "rr1": ORIGINAL_IN_C, "rr2": SUBSTITUTE_MISSING,
              "rr3": ORIGINAL_IN_C}
    metrics, _ = cal.calibrate(judged(p_yes), labelled(tmp_path, rated), THRESHOLDS)
    # 12 pairs: judge passes 7, people pass 6; p_o = 9/12, p_e = 7/12 * 6/12 + 5/12 * 6/12 = 1/2 -> κ = 1/2
    assert metrics["pairs_compared"] == 12
    assert metrics["images_compared"] == 25  # 12 pairs' two images + half's I_o
    assert metrics["confusion"] == {"both_pass": 5, "both_reject": 4, "judge_pass_people_reject": 2,
                                    "judge_reject_people_pass": 1}
    assert metrics["accuracy"] == 0.75
    assert metrics["cohen_kappa"] == 0.5
    assert metrics["reject_precision"] == 0.8   # judge rejects 5, people reject 4 of them
    assert metrics["reject_recall"] == 0.6667   # people reject 6, the judge 4 of them
    assert json.loads(json.dumps(metrics)) == metrics


def test_p_yes_equal_to_the_threshold_is_yes(tmp_path):
    labels = labelled(tmp_path, {"a": ("own", "own"), "b": ("neither", "own"), "c": ("own", "own")})
    p_yes = {"a": (0.5, 0.9, 0.1, 0.1), "b": (0.4999, 0.9, 0.1, 0.1), "c": (0.9, 0.9, 0.1, 0.5)}
    metrics, _ = cal.calibrate(judged(p_yes), labels, THRESHOLDS)
    # a: original_o at 0.5 is yes -> passes; c: original_c at 0.5 is yes -> rejected (I_c shows the original)
    assert metrics["confusion"] == {"both_pass": 1, "both_reject": 1, "judge_pass_people_reject": 0,
                                    "judge_reject_people_pass": 1}
    assert metrics["questions"]["original_o"]["kappa"] == 1.0  # yes, no, yes both ways


def best_case(tmp_path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """original_o: people yes at P = 0.75 and 0.25, no at 0.625 and 0.125; every other question as expected."""
    labels = labelled(tmp_path, {"a": ("own", "own"), "b": ("neither", "own"), "c": ("own", "own"),
                                 "d": ("neither", "own")})
    return judged({c: (p, 0.9, 0.1, 0.1) for c, p in zip("abcd", (0.75, 0.625, 0.25, 0.125))}), labels


def test_the_best_threshold_beats_the_configured_one_and_ties_go_closest_then_smaller(tmp_path):
    p_yes, labels = best_case(tmp_path)
    metrics, _ = cal.calibrate(p_yes, labels, THRESHOLDS)
    question = metrics["questions"]["original_o"]
    # people T F T F. At 0.5: T T F F, p_o = 1/2 = p_e -> κ 0. At 0.75: T F F F and at 0.25: T T T F, each
    # p_o = 3/4, p_e = 1/2 -> κ 1/2; 0.125 answers all yes: no κ. 0.25 and 0.75 tie, both 0.25 from 0.5: the smaller.
    assert question == {"images": 4, "auc": 0.75, "kappa": 0.0, "threshold": 0.5, "best_threshold": 0.25,
                        "best_kappa": 0.5}
    assert metrics["questions"]["substitute_c"]["best_threshold"] is None  # people all yes: κ undefined throughout
    assert metrics["best_thresholds"] == {**THRESHOLDS, "original_o": 0.25}
    # pairs pass iff original_o is yes, so the pair κ follows the question's: 0 configured, 1/2 at the best
    assert (metrics["cohen_kappa"], metrics["kappa_at_best_thresholds"]) == (0.0, 0.5)
    closer = cal.calibrate(p_yes, labels, {**THRESHOLDS, "original_o": 0.7})[0]
    assert closer["questions"]["original_o"]["best_threshold"] == 0.75


def test_the_kappa_sweep_matches_cohen_kappa_score_at_every_threshold():
    rng = np.random.default_rng(0)
    p_yes = rng.integers(0, 20, 200) / 20  # ties on purpose
    people = rng.random(200) < p_yes
    thresholds, kappas = cal.kappa_sweep(people, p_yes)
    assert sorted(thresholds.tolist()) == np.unique(p_yes)[1:].tolist()  # the lowest answers every image yes
    assert kappas == pytest.approx([cohen_kappa_score(people, p_yes >= t) for t in thresholds], abs=1e-12)


def test_roc_separates_perfectly_with_auc_one_and_only_questions_answered_both_ways(tmp_path):
    labels = labelled(tmp_path, {"a": ("own", "own"), "b": ("own", "own"), "c": ("neither", "own"),
                                 "d": ("neither", "own")})
    p_yes = judged({c: (p, 0.9, 0.1, 0.1) for c, p in zip("abcd", (0.9, 0.8, 0.3, 0.2))})
    metrics, roc = cal.calibrate(p_yes, labels, THRESHOLDS)
    assert metrics["questions"]["original_o"]["auc"] == 1.0
    assert metrics["questions"]["substitute_c"]["auc"] is None
    assert roc.schema == pl.Schema(cal.ROC)
    assert roc["question"].unique().to_list() == ["original_o"]  # the other three: people answer one way
    assert roc["threshold"][0] == 0.9001  # roc_curve's inf: just above every P(Yes)
    assert roc.filter(pl.col("fpr") == 0)["tpr"].max() == 1.0


def test_no_labels_gives_every_key_without_values():
    labels = ag.image_labels(ls.ratings([]))
    metrics, roc = cal.calibrate(judged({"a": PASS}), labels, THRESHOLDS)
    undefined = {"images": 0, "auc": None, "kappa": None, "threshold": 0.5, "best_threshold": None,
                 "best_kappa": None}
    assert metrics == {
        "pairs_compared": 0, "images_compared": 0, "accuracy": None, "cohen_kappa": None, "reject_precision": None,
        "reject_recall": None, "confusion": dict.fromkeys(
            ("both_pass", "both_reject", "judge_pass_people_reject", "judge_reject_people_pass"), 0),
        "questions": dict.fromkeys(JUDGE_QUESTIONS, undefined), "best_thresholds": THRESHOLDS,
        "kappa_at_best_thresholds": None}
    assert roc.is_empty() and roc.schema == pl.Schema(cal.ROC)


@pytest.mark.parametrize("with_labels", [True, False])
def test_roc_chart_draws_a_curve_per_question_or_says_there_are_no_labels(tmp_path, with_labels):
    p_yes, labels = best_case(tmp_path)
    metrics, roc = cal.calibrate(p_yes, labels if with_labels else labels.clear(), THRESHOLDS)
    aucs = {q: r["auc"] for q, r in metrics["questions"].items()}
    figure = figures.roc_chart(roc, aucs)
    ax = figure.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()] if with_labels else []
    assert legend == (["original_o (AUC 0.75)"] if with_labels else [])
    assert ("no human labels yet" in [t.get_text() for t in ax.texts]) is not with_labels
    figure.savefig(io.BytesIO(), format="png")


def test_a_question_the_judge_did_not_ask_is_left_out_not_scored(tmp_path):
    """An insert asks nothing about the original (null P(Yes)): its original questions count nowhere, while its
    substitute questions and its pair verdict still do."""
    labels = labelled(tmp_path, {"ins": ("own", "own"), "a": ("own", "own"), "b": ("other", "other")})
    p_yes = judged({"ins": (None, 0.9, 0.1, None), "a": PASS, "b": (0.2, 0.3, 0.8, 0.7)})
    metrics, roc = cal.calibrate(p_yes, labels, THRESHOLDS)
    assert {q: m["images"] for q, m in metrics["questions"].items()} == {
        "original_o": 2, "substitute_c": 3, "substitute_o": 3, "original_c": 2}
    assert metrics["pairs_compared"] == 3 and metrics["accuracy"] == 1.0
    assert roc["threshold"].is_finite().all() and not roc.filter(pl.col("fpr").is_nan()).height
