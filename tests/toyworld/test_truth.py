"""Truth of a pair and of a run: judged on rendered scenes, summed into the metrics of truth.json."""

from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

from tasks.core.schemas import SAMPLES, TRUTH, TRUTH_SAMPLES
from tasks.image.params import RANK_KEYS, SelectionParams
from tasks.toyworld import checker, summary, truth, world

pytest_plugins = ["tests.image.fixtures"]

CIRCLE, SQUARE = world.Obj("circle", "red", "small", 0.5, 0.25), world.Obj("square", "blue", "large", 0.5, 0.72)
C_O = "A red circle above a large blue square."


def judged(scene_o, scene_c, caption, counterfactual) -> tuple[bool, bool]:
    verdict = truth.judge_pair(world.render(scene_o, 32), world.render(scene_c, 32), caption, counterfactual)
    return verdict["accurate"], verdict["minimal"]


@pytest.mark.parametrize(("counterfactual", "scene_c", "expected"), [
    ("A red triangle above a large blue square.", (world.Obj("triangle", "red", "small", 0.5, 0.25), SQUARE),
     (True, True)),
    ("A red triangle above a large blue square.", (world.Obj("triangle", "red", "small", 0.3, 0.2), SQUARE),
     (True, False)),  # the edited object moved: P2P should have kept its place
    ("A red triangle above a large blue square.", (CIRCLE, SQUARE), (False, False)),  # I_c ignores C_c
    ("A red circle.", (CIRCLE,), (True, True)),  # a deleted phrase: the first object stays
    ("A red triangle triangle above a large blue square.", (CIRCLE, SQUARE), (False, False)),  # no world caption
    ("A large blue square above a red circle.", (world.Obj("square", "blue", "large", 0.5, 0.28),
                                                 world.Obj("circle", "red", "small", 0.5, 0.75)), (True, True)),
    # the phrases swapped: each place now shows the other object, the layout kept (what P2P should give)
])
def test_a_pair_is_accurate_when_both_images_show_their_caption(counterfactual, scene_c, expected):
    assert judged((CIRCLE, SQUARE), scene_c, C_O, counterfactual) == expected


@pytest.mark.parametrize(("caption", "counterfactual"), [
    ("A red circle.", "A small red circle."),  # an insert: a small red circle shows both captions
    ("A small red circle.", "A red circle."),  # a delete
    ("A red circle above a large blue square.", "A red circle above a blue square."),
])
def test_a_copy_of_i_o_never_shows_an_edit(caption, counterfactual):
    """The pair must show its edit: an I_c identical to I_o (which shows C_c too, since C_c or C_o leaves an
    attribute free) is not accurate."""
    scene = (world.Obj("circle", "red", "small", 0.5, 0.25), SQUARE) if "square" in caption else (CIRCLE,)
    assert judged(scene, scene, caption, counterfactual) == (False, False)
    verdict = truth.judge_pair(world.render(scene, 32), world.render(scene, 32), caption, counterfactual)
    assert verdict["o_shows_o"] and verdict["c_shows_c"] and (verdict["o_shows_c"] or verdict["c_shows_o"])


def test_an_insert_that_shows_its_attribute_is_accurate():
    large = (world.Obj("circle", "red", "large", 0.5, 0.5),)
    assert judged(large, (world.Obj("circle", "red", "small", 0.5, 0.5),), "A large red circle.",
                  "A small red circle.") == (True, True)
    assert judged((world.Obj("circle", "red", "large", 0.5, 0.5),), (world.Obj("circle", "red", "small", 0.5, 0.5),),
                  "A red circle.", "A small red circle.") == (True, True)  # I_o large: it does not show C_c
    # I_c shows C_o as well, which it cannot help: C_c entails C_o


def test_a_count_edit_compares_the_objects_both_counts_share():
    """Two circles -> three: the two of I_o must stay in place in I_c (minimality could not fail for counts)."""
    two = (world.Obj("circle", "red", "small", 0.2, 0.2), world.Obj("circle", "red", "small", 0.8, 0.2))
    kept = two + (world.Obj("circle", "red", "small", 0.5, 0.8),)
    moved = (world.Obj("circle", "red", "small", 0.2, 0.8), world.Obj("circle", "red", "small", 0.5, 0.2),
             world.Obj("circle", "red", "small", 0.8, 0.8))
    assert judged(two, kept, "Two red circles.", "Three red circles.") == (True, True)
    assert judged(two, moved, "Two red circles.", "Three red circles.") == (True, False)


def _samples(rows: list[tuple]) -> pl.DataFrame:
    """TRUTH_SAMPLES rows from (caption_id, sample, edit_type, accurate, minimal, accurate_no_p2p, minimal_no_p2p)."""
    return pl.DataFrame([{"caption_id": c, "sample": s, "edit_type": t, "caption": "A red circle.",
                          "counterfactual": "A blue circle.", "o_shows_o": a, "c_shows_c": a, "o_shows_c": False,
                          "c_shows_o": False, "reason_o": None, "reason_c": None if a else "colour", "accurate": a,
                          "minimal": m, "accurate_no_p2p": an, "minimal_no_p2p": mn}
                         for c, s, t, a, m, an, mn in rows], schema=TRUTH_SAMPLES)


def _scores(rows: list[tuple]) -> pl.DataFrame:
    """generate's samples table from (caption_id, sample, clip_dir, sim_o, sim_c): every sample passes."""
    return pl.DataFrame([{"caption_id": c, "sample": s, "clip_dir": d, "sim_text_image_o": so, "sim_text_image_c": sc,
                          "sim_image_image": 0.9} for c, s, d, so, sc in rows]).with_columns(
        *(pl.lit(None, dtype).alias(name) for name, dtype in SAMPLES.items()
          if name not in ("caption_id", "sample", "clip_dir", "sim_text_image_o", "sim_text_image_c",
                          "sim_image_image")))


PERMISSIVE = SelectionParams(min_text_image_o=-1, min_text_image_c=-1, min_image_image=-1, min_clip_dir=-1)


def test_metrics_sum_the_run_with_counts_and_intervals():
    samples = _samples([("a", 0, "noun", True, True, True, False), ("a", 1, "noun", False, False, True, True),
                        ("b", 0, "swap", False, False, False, False), ("b", 1, "swap", True, False, True, False)])
    selected = samples.filter(pl.col("sample") == pl.when(pl.col("caption_id") == "a").then(0).otherwise(1)).select(
        list(TRUTH))
    subjects = pl.DataFrame({"caption_id": ["a", "a", "b", "b"], "sample": [0, 1, 0, 1],
                             "subjects_pass": [True, False, False, False]})
    judge = pl.DataFrame({"caption_id": ["a", "b"], "judge_pass": [True, False]})
    scores = _scores([("a", 0, 0.1, 0.3, 0.3), ("a", 1, 0.5, 0.1, 0.1), ("b", 0, 0.4, 0.2, 0.2),
                      ("b", 1, 0.3, 0.4, 0.4)])
    m = summary.metrics(samples, selected, subjects, judge, scores, PERMISSIVE)
    assert m["pair_accuracy"]["samples"] | {"ci95": None} == {"rate": 0.5, "count": 2, "of": 4, "ci95": None}
    low, high = m["pair_accuracy"]["samples"]["ci95"]
    assert 0.1 < low < 0.5 < high < 0.9  # Wilson's interval of 2/4
    assert m["pair_accuracy"]["selected"]["count"] == 2 and m["filter_lift"]["value"] == 2.0
    assert m["minimality"]["selected"]["rate"] == 0.5
    # paired: sample a0 is a real counterfactual with sharing, not without; a1 the other way round
    assert m["p2p_gain"]["value"] == 0.0 and (m["p2p_gain"]["better"], m["p2p_gain"]["worse"]) == (1, 1)
    assert m["by_edit_type"]["swap"]["minimality"]["selected"]["rate"] == 0.0
    assert m["both_subjects_check"]["lift"] == 2.0 and m["both_subjects_check"]["kappa"] == 0.5
    assert m["judge"]["kappa"] == 0.0  # truth constant over the judged pairs: no agreement
    # clip_dir ranks a1 and b0 first (both wrong), min_text_image a0 and b1 (both right)
    assert {k: m["selection_keys"][k]["count"] for k in ("clip_dir", "min_text_image")} == {
        "clip_dir": 0, "min_text_image": 2}
    assert set(m["selection_keys"]) == set(RANK_KEYS)
    assert {k: v["of"] for k, v in m["samples_per_pair"].items()} == {"1": 2, "2": 2}
    assert m["samples_per_pair"]["1"]["count"] == 1  # the first sample of each pair: a0 right, b0 wrong


def test_intervals_do_not_depend_on_row_order():
    rows = [(f"p{i}", k, "lexical", (i * k) % 3 == 0, (i + k) % 2 == 0, i % 4 == 0, k == 0) for i in range(30)
            for k in range(4)]
    samples = _samples(rows)
    selected = samples.filter(pl.col("sample") == 0).select(list(TRUTH))
    groups = [summary.group(frame, selected.sample(fraction=1.0, shuffle=True, seed=seed))
              for seed, frame in enumerate([samples, samples.reverse(), samples.sample(fraction=1.0, shuffle=True,
                                                                                       seed=5)])]
    assert groups[0] == groups[1] == groups[2] and groups[0]["filter_lift"]["ci95"] is not None


def test_image_accuracy_by_geneval_family():
    samples = _samples([("a", 0, "lexical", True, True, True, True)]).with_columns(
        caption=pl.lit("Two red circles."), counterfactual=pl.lit("A red circle above a blue square."),
        c_shows_c=pl.lit(False), reason_c=pl.lit("relation"))
    images = summary.image_accuracy(samples)
    assert images["all"]["count"] == 1 and images["all"]["of"] == 2
    families = {name: (f["count"], f["of"]) for name, f in images["families"].items()}
    assert families == {"single_object": (0, 0), "two_objects": (0, 1), "counting": (1, 1), "colours": (1, 1),
                        "position": (0, 1), "attribute_binding": (0, 1)}
    assert images["macro"] == round(2 / 5, 4) and images["failures"] == {"relation": 1}


def test_truth_renders_each_sample_as_generated_and_again_without_sharing(tiny_specs, monkeypatch):
    """The second render of every sample is the same seed and scale with p2p fraction 0, through the image stage's
    batching; the first is the sample as generate planned it."""
    from tasks.image import render
    from tasks.image.backends.sd1 import load_diffusion
    from tests.image.fixtures import make_params

    calls = []
    real = render.Batcher.render

    def spy(self, diffusion, prompts, samples, params):
        calls.append(list(samples))
        yield from real(self, diffusion, prompts, samples, params)

    monkeypatch.setattr(render.Batcher, "render", spy)
    pair = pl.DataFrame({"caption_id": ["a"] * 3, "sample": [0, 1, 2], "edit_type": ["noun"] * 3,
                         "caption": [C_O] * 3, "counterfactual": ["A red triangle above a large blue square."] * 3,
                         "seed": [3, 4, 5], "p2p_fraction": [0.5, 0.7, 1.0], "guidance_scale": [2.0, 3.0, 4.0]})
    params = make_params(tiny_specs, steps=2, batch_samples=2)
    rows = truth.pair_truth(pair, load_diffusion(tiny_specs[0], None), params)
    assert [(s.seed, s.p2p_fraction, s.guidance_scale) for s in calls[0]] == [(3, 0.5, 2.0), (4, 0.7, 3.0),
                                                                              (5, 1.0, 4.0)]
    assert [(s.seed, s.p2p_fraction, s.guidance_scale) for s in calls[1]] == [(3, 0.0, 2.0), (4, 0.0, 3.0),
                                                                              (5, 0.0, 4.0)]
    assert pl.DataFrame(rows, schema=TRUTH_SAMPLES)["sample"].to_list() == [0, 1, 2]


def test_minimal_needs_the_shared_objects_in_place():
    spec_o = world.Spec((world.Phrase(1, "circle", "red"), world.Phrase(1, "square", "blue")), "above")
    spec_c = world.with_phrase(spec_o, 0, shape="triangle")
    square = world.Obj("square", "blue", "small", 0.5, 0.8)
    image_o = world.render((world.Obj("circle", "red", "small", 0.5, 0.2), square), 32)
    image_c = world.render((world.Obj("triangle", "red", "small", 0.5, 0.2), square), 32)
    assert truth.minimal(image_o, image_c, spec_o, spec_c)
    moved = world.render((world.Obj("triangle", "red", "small", 0.5, 0.2), replace(square, x=0.75)), 32)
    assert checker.shows(moved, spec_c) and not truth.minimal(image_o, moved, spec_o, spec_c)
    resized = world.render((world.Obj("triangle", "red", "large", 0.5, 0.25), square), 32)
    assert checker.shows(resized, spec_c) and not truth.minimal(image_o, resized, spec_o, spec_c)
