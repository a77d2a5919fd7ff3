"""Run report: funnel counts, metrics against hand computations, plot CSVs, deterministic PNG figures."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import polars as pl
import pytest
from PIL import Image

from tasks.core import schemas
from tasks.core.schemas import SCORE_COLUMNS
from tasks.image import selection, thresholds
from tasks.image.params import SelectionParams
from tasks.release import figures, report
from tasks.text import ingest

OPEN = SelectionParams(min_text_image_o=-1, min_text_image_c=-1, min_image_image=-1, min_clip_dir=-1,
                       min_subject_margin_o=None, min_subject_margin_c=None)
NAN = math.nan


def frame(rows: list[dict], schema: dict) -> pl.DataFrame:
    return pl.DataFrame([{**dict.fromkeys(schema), **row} for row in rows], schema=schema)


def counterfactual(caption_id: str, caption: str, word: str, substitute: str, similarity: float,
                   ppl: float) -> dict:
    start = caption.index(word)
    return {"caption_id": caption_id, "image_id": "img", "caption": caption, "edit_type": "noun", "start": start,
            "end": start + len(word),
            "counterfactual": caption[:start] + substitute + caption[start + len(word):], "original_word": word,
            "substitute": substitute, "similarity": similarity, "perplexity": ppl}


CF = [counterfactual("c0", "A sleepy old dog on a sofa next to a window in a bright living room with plants and a "
                     "lamp.", "dog", "cat", 0.82, 10.0),  # long enough to wrap in the contact sheet
      counterfactual("c1", "Two $5 bills | a <b>wallet</b>.", "bills", "coins", 0.85, 100.0),
      counterfactual("c2", "A red bus parked near a long row of trees on a quiet street in the old part of town.",
                     "bus", "tram", 0.90, 1000.0)]
# (caption_id, sample, sim_text_image_o, sim_text_image_c, sim_image_image, clip_dir, reject_reason, unet_evals)
SAMPLES = [("c0", 0, 0.1, 0.2, 0.9, 0.3, None, 16), ("c0", 1, 0.3, 0.4, 0.8, 0.5, None, 32),
           ("c0", 2, 0.2, 0.0, 0.7, 0.1, None, 16), ("c1", 0, NAN, NAN, NAN, NAN, "black_image", 16),
           ("c1", 1, 0.5, 0.6, 0.6, 0.2, None, 32), ("c2", 0, 0.4, 0.4, 0.5, NAN, None, 16)]


def image_paths(caption_id: str, sample: int) -> tuple[str, str]:
    return f"{caption_id}/{sample}_o.png", f"{caption_id}/{sample}_c.png"


def select(samples: pl.DataFrame, params: SelectionParams) -> pl.DataFrame:
    """The selection stage's output when each pair's best passing sample renders canonically to its screening scores:
    the first candidate wins (tried = 1), built by selection's own ranking and row helpers."""
    best = thresholds.ranked(samples, params).filter(pl.col("rank") == 0)
    rows = [selection.selected_row(c, c, c["rank"] + 1, image_paths(c["caption_id"], c["sample"]))
            for c in best.iter_rows(named=True)]
    return pl.DataFrame(rows, schema=schemas.SELECTED)


@pytest.fixture
def world(tmp_path) -> dict:
    """5 captions -> 4 with a site -> 3 with a candidate -> 3 counterfactuals -> 2 accepted (c2's clip_dir is NaN)."""
    pairs = {row["caption_id"]: row for row in CF}
    samples = frame([{**{k: pairs[cid][k] for k in schemas.PAIR}, "sample": s, "seed": 100 + s,
                      **dict(zip(SCORE_COLUMNS, scores)), "nan": False, "reject_reason": reason, "unet_evals": evals}
                     for cid, s, *scores, reason, evals in SAMPLES], schemas.SAMPLES)
    selected = select(samples, OPEN)
    images = tmp_path / "images"  # the winners' PNGs, as the selection stage writes them
    for row in selected.iter_rows(named=True):
        for column, shade in (("image_o", 40), ("image_c", 200)):
            (images / row[column]).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.full((8, 8, 3), shade + row["sample"], np.uint8)).save(images / row[column])
    return {
        "captions": frame([{"caption_id": f"c{i}"} for i in range(5)], ingest.SCHEMA),
        "sites": frame([{"caption_id": c, "edit_type": t} for c, t in (("c0", "noun"), ("c0", "delete"), ("c1", "noun"),
                                                                     ("c2", "noun"), ("c3", "delete"))], schemas.SITES),
        "candidates": frame([{"caption_id": c, "edit_type": "noun"} for c in ("c0", "c1", "c1", "c2")],
                            schemas.CANDIDATES),
        "similar": frame([{"caption_id": c, "edit_type": "noun"} for c in ("c0", "c1", "c2")], schemas.SIMILARITY),
        "counterfactuals": frame(CF, schemas.COUNTERFACTUALS),
        "samples": samples,
        "selected": selected,
        "images": images,
    }


def test_selected_fixture_holds_the_best_passing_sample_per_pair(world):
    selected = world["selected"]
    assert selected.schema == pl.Schema(schemas.SELECTED)
    assert selected.select("caption_id", "sample", "tried", "image_o").rows() == [
        ("c0", 1, 1, "c0/1_o.png"), ("c1", 1, 1, "c1/1_o.png")]


def test_funnel_counts_caption_level_steps(world):
    args = [world[k] for k in ("captions", "sites", "candidates", "counterfactuals", "selected")]
    assert list(report.funnel(*args).items()) == [("captions_in", 5), ("with_site", 4), ("with_candidate", 3),
                                                  ("with_counterfactual", 3), ("with_accepted_pair", 2), ("final", 2)]
    assert report.funnel(*args, exported_ids=["c0"])["final"] == 1


def test_funnel_rejects_a_step_that_grows(world):
    args = [world[k] for k in ("captions", "sites", "candidates", "counterfactuals", "selected")]
    with pytest.raises(ValueError, match="with_counterfactual=3 to with_accepted_pair=4"):
        report.funnel(*args[:4], pl.concat([world["selected"]] * 2))
    with pytest.raises(ValueError, match="final"):
        report.funnel(*args, exported_ids=["c0", "c1", "c2"])


def test_score_columns_match_the_clip_module():
    assert report.SCORE_COLUMNS is SCORE_COLUMNS


def test_run_metrics_against_hand_computations(world):
    funnel = {"captions_in": 5, "with_site": 4, "with_candidate": 3, "with_counterfactual": 3,
              "with_accepted_pair": 2, "final": 2}
    stages = {"selection": {"accepted": 2, "acceptance_rate": 2 / 3, "odd": NAN, "rejects": {"no_sample_passed": 1}}}
    m = report.run_metrics(funnel, stages, world["counterfactuals"], world["samples"], world["selected"])
    assert json.loads(json.dumps(m, allow_nan=False)) == m
    assert m["funnel"] == funnel
    assert m["rates"] == {"with_site": 0.8, "with_candidate": 0.75, "with_counterfactual": 1.0,
                          "with_accepted_pair": 0.666667, "final": 1.0, "overall": 0.4, "pair_acceptance": 0.666667}
    assert m["means"]["similarity"] == round((0.82 + 0.85 + 0.90) / 3, 6)
    assert m["means"]["perplexity"] == 370.0
    # valid = not rejected (the black c1 sample drops out); NaN scores are skipped per column
    assert m["means"]["samples"] == {"sim_text_image_o": 0.3, "sim_text_image_c": 0.32, "sim_image_image": 0.7,
                                     "clip_dir": round((0.3 + 0.5 + 0.1 + 0.2) / 4, 6)}
    # selected: c0 sample 1 (highest clip_dir) and c1 sample 1
    assert m["means"]["selected"] == {"sim_text_image_o": 0.4, "sim_text_image_c": 0.5, "sim_image_image": 0.7,
                                      "clip_dir": 0.35}
    assert (m["samples"], m["valid_samples"], m["pairs_generated"], m["samples_per_pair"]) == (6, 5, 3, 2.0)
    assert (m["unet_evals"], m["unet_evals_per_accepted_pair"]) == (128, 64.0)
    assert m["stages"] == {"selection": {"accepted": 2, "acceptance_rate": 0.666667, "odd": None,
                                      "rejects": {"no_sample_passed": 1}}}


def empty_inputs() -> dict:
    return {"counterfactuals": pl.DataFrame(schema=schemas.COUNTERFACTUALS),
            "samples": pl.DataFrame(schema=schemas.SAMPLES), "selected": pl.DataFrame(schema=schemas.SELECTED)}


def test_empty_run_gives_zero_counts_and_undefined_means():
    e = empty_inputs()
    funnel = report.funnel(pl.DataFrame(schema=ingest.SCHEMA), pl.DataFrame(schema=schemas.SITES),
                           pl.DataFrame(schema=schemas.CANDIDATES), e["counterfactuals"], e["selected"])
    assert set(funnel.values()) == {0}
    m = report.run_metrics(funnel, {}, e["counterfactuals"], e["samples"], e["selected"])
    assert json.loads(json.dumps(m, allow_nan=False)) == m
    assert set(m["rates"].values()) == {None}
    assert m["means"]["similarity"] is None and set(m["means"]["selected"].values()) == {None}
    assert (m["unet_evals"], m["unet_evals_per_accepted_pair"], m["samples_per_pair"]) == (0, None, None)


def test_plot_data_uses_fixed_bins(world, tmp_path):
    """Edge values land in the bin their left edge names."""
    funnel = {"captions_in": 5, "final": 2}
    paths = report.write_plot_data(world["counterfactuals"], world["selected"], tmp_path, funnel=funnel)
    assert sorted(p.name for p in paths) == ["clip_scores_hist.csv", "funnel.csv", "perplexity_hist.csv",
                                             "similarity_hist.csv"]
    assert pl.read_csv(tmp_path / "funnel.csv").rows() == [("captions_in", 5), ("final", 2)]
    similarity = pl.read_csv(tmp_path / "similarity_hist.csv")
    assert similarity.height == 100 and similarity["count"].sum() == 3
    assert similarity.filter(pl.col("count") > 0)["bin"].to_list() == [0.82, 0.85, 0.9]
    ppl = pl.read_csv(tmp_path / "perplexity_hist.csv")
    assert ppl.filter(pl.col("count") > 0)["log10_perplexity"].to_list() == [1.0, 2.0, 3.0]
    clip = pl.read_csv(tmp_path / "clip_scores_hist.csv")
    assert clip.columns == ["bin", *SCORE_COLUMNS] and clip.height == 40 and clip["bin"][0] == -1.0
    assert clip.filter(pl.col("clip_dir") > 0)["bin"].to_list() == [0.2, 0.5]  # the selected pairs' clip_dir


EXPECTED_SIZES = {"funnel.png": (700, 360), "similarity.png": (600, 400), "perplexity.png": (600, 400),
                  "clip_scores.png": (1000, 700), "examples.png": (1000, 360)}


def check_pngs(paths) -> dict[str, bytes]:
    assert {p.name for p in paths} == set(EXPECTED_SIZES)
    for path in paths:
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert (image.format, image.size) == ("PNG", EXPECTED_SIZES[path.name])
    return {p.name: p.read_bytes() for p in paths}


def test_figures_are_valid_sized_and_byte_identical_on_rerun(world, tmp_path):
    funnel = {"captions_in": 5, "with_site": 4, "final": 2}
    args = (world["counterfactuals"], world["samples"], world["selected"], funnel, world["images"])
    kwargs = {"thresholds": SelectionParams().thresholds(), "window": (0.8, 0.91)}
    first = check_pngs(report.figures(*args, tmp_path / "one", **kwargs))
    assert check_pngs(report.figures(*args, tmp_path / "two", **kwargs)) == first
    assert b"matplotlib" not in first["funnel.png"]  # no Software stamp
    with Image.open(io.BytesIO(first["examples.png"])) as image:  # the 8x8 PNGs were drawn: their shades appear
        colours = {rgb for _, rgb in image.convert("RGB").getcolors(1 << 20)}
    assert {(41, 41, 41), (201, 201, 201)} <= colours


def test_figures_of_empty_inputs_say_no_data(tmp_path):
    e = empty_inputs()
    check_pngs(report.figures(e["counterfactuals"], e["samples"], e["selected"], {}, tmp_path / "img", tmp_path))
    texts = [t.get_text() for t in figures.contact_sheet([], tmp_path).findobj(lambda a: hasattr(a, "get_text"))]
    assert "no selected pairs" in texts


def test_more_examples_than_fit_in_a_row_grow_the_sheet(world, tmp_path):
    rows = figures.example_rows(pl.concat([world["selected"]] * 3).with_columns(
        caption_id=pl.format("{}_{}", "caption_id", pl.int_range(pl.len()))), world["counterfactuals"], 5)
    assert len(rows) == 5
    buffer = io.BytesIO()
    figures.contact_sheet(rows, world["images"]).savefig(buffer, format="png", dpi=figures.DPI)
    assert Image.open(buffer).size == (1000, 3 * 360)


def test_examples_take_the_best_pairs_and_highlight_the_swap(world, tmp_path):
    rows = figures.example_rows(world["selected"], world["counterfactuals"], 1)
    assert [(r["caption_id"], r["substitute"]) for r in rows] == [("c0", "cat")]
    rows = figures.example_rows(world["selected"], world["counterfactuals"], 8)
    rows[1]["image_c"] = "gone.png"  # a missing PNG is drawn as a note, not an error
    sheet = figures.contact_sheet(rows, world["images"])
    texts = sheet.findobj(lambda a: hasattr(a, "get_text") and a.get_text())
    bold = {(t.get_text(), t.get_color()) for t in texts if t.get_fontweight() == "bold"}
    assert bold == {("dog", figures.HIGHLIGHT["o"]), ("cat", figures.HIGHLIGHT["c"]),
                    ("bills", figures.HIGHLIGHT["o"]), ("coins", figures.HIGHLIGHT["c"])}
    assert "image missing" in {t.get_text() for t in texts}
    assert all(not t._parse_math for t in texts if "$" in t.get_text())  # "$5 bills | a $..." is never mathtext


def test_wrap_and_swap_span():
    text = "A red bus parked near a long row of trees on a quiet street"
    lines = figures.wrap(text, 20)
    assert all(b - a <= 20 for a, b in lines)
    assert " ".join(text[a:b] for a, b in lines) == text
    assert figures.wrap("abcdefghij", 4) == [(0, 4), (4, 8), (8, 10)]
    assert figures.swap_span("A dog on a sofa.", 2, "dog") == (2, 5)
    assert figures.swap_span("A dog on a sofa.", 3, "dog") is None
    assert figures.swap_span("A dog on a sofa.", None, None) is None


def test_type_funnel_counts_each_edit_type_at_every_step(world):
    assert report.type_funnel(world, ("noun", "delete", "insert")) == {
        "noun": {"sites": 3, "candidates": 4, "similar": 3, "counterfactuals": 3, "selected": 2},
        "delete": {"sites": 2, "candidates": 0, "similar": 0, "counterfactuals": 0, "selected": 0},
        "insert": dict.fromkeys(report.TYPE_STEPS, 0)}
