"""The VLM judge through its real code path on tiny random LLaVA-shaped models built here: P(Yes) read from the
next-token logits (a model whose weights force "Yes" answers ~1, one forcing "No" ~0), the questions an edit type
asks, batching, the verdict at its threshold boundaries, and the flow's per-pair cache (a threshold change re-asks
nothing; a template, an image or the model re-asks)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from flows.engine.counters import facts, run_log
from flows.judge import judge_flow
from tasks.core.schemas import JUDGE_COLUMNS, JUDGED, SELECTED
from tasks.core.writing import write_frame
from tasks.demo.tiny_vlm import build_tiny_vlm
from tasks.image import store
from tasks.judge import ask
from tasks.judge.verdict import verdicts
from tests.conftest import project_params

CAPTIONS = ["a dog sitting on a couch", "a cat sitting on a couch", "a red car on the street"]
NOUN = {"caption_id": "1_0", "edit_type": "noun", "original_word": "dog", "substitute": "cat"}
INSERT = {"caption_id": "2_0", "edit_type": "insert", "original_word": "", "substitute": "red "}


def force_answer(source: Path, target: Path, answer: str) -> Path:
    """A copy of the model at `source` whose next-token logit of `answer` is ~500 on every input, by its weights:
    residual dimension 0 is 1 at every text token and no layer writes it, so after the final RMSNorm (weights 1) it
    stays positive, and the answer's LM-head row reads only it."""
    model = AutoModelForImageTextToText.from_pretrained(source)
    processor = AutoProcessor.from_pretrained(source)
    token = processor.tokenizer.encode(answer, add_special_tokens=False)[0]
    decoder = model.model.language_model
    with torch.no_grad():
        decoder.embed_tokens.weight[:, 0] = 1.0
        for layer in decoder.layers:
            layer.self_attn.o_proj.weight[0] = 0.0
            layer.mlp.down_proj.weight[0] = 0.0
        model.lm_head.weight[token] = 0.0
        model.lm_head.weight[token, 0] = 100.0
    model.save_pretrained(target)
    processor.save_pretrained(target)
    return target


@pytest.fixture(scope="session")
def vlms(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vlm")
    random = Path(build_tiny_vlm(root / "random", CAPTIONS, seed=0).id)
    return {"random": random, "yes": force_answer(random, root / "yes", "Yes"),
            "no": force_answer(random, root / "no", "No")}


def judge_params(model: Path, **update):
    section = project_params().judge
    return section.model_copy(update={"model": section.model.model_copy(update={"id": str(model)}), **update})


IMAGES = {side: np.random.default_rng(i).integers(0, 256, (32, 32, 3), dtype=np.uint8) for i, side in
          enumerate("oc")}


def test_the_answer_is_read_from_the_next_token_logits_of_yes_and_no(vlms):
    yes = ask.ask(NOUN, IMAGES, judge_params(vlms["yes"]))
    no = ask.ask(NOUN, IMAGES, judge_params(vlms["no"]))
    random = ask.ask(NOUN, IMAGES, judge_params(vlms["random"]))
    assert list(yes) == ["original_o", "substitute_c", "substitute_o", "original_c"]
    assert all(p > 0.999 for p in yes.values()) and all(p < 0.001 for p in no.values())
    assert all(0.01 < p < 0.99 for p in random.values())
    assert len(set(random.values())) == 4  # each question its own image and text
    frame = pl.DataFrame([{f"judge_{q}": p for q, p in answers.items()} for answers in (yes, no)])
    assert verdicts(frame, dict.fromkeys(ask.ASKED, 0.5))["judge_reason"].to_list() == [
        "judge_substitute_in_image_o", "judge_original_missing"]


def test_an_insert_is_asked_only_about_the_inserted_phrase_in_its_own_template(vlms):
    params = judge_params(vlms["yes"])
    assert ask.questions(INSERT, params.templates) == {
        "substitute_c": ("c", params.templates["insert"].format(word="red")),
        "substitute_o": ("o", params.templates["insert"].format(word="red"))}
    answers = ask.ask(INSERT, IMAGES, params)
    assert answers["original_o"] is None and answers["original_c"] is None and answers["substitute_c"] > 0.999
    frame = pl.DataFrame([{f"judge_{q}": p for q, p in answers.items()}],
                         schema=dict.fromkeys(JUDGE_COLUMNS, pl.Float64))
    assert verdicts(frame, dict.fromkeys(ask.ASKED, 0.5))["judge_reason"].to_list() == ["judge_substitute_in_image_o"]


def test_a_question_gets_the_same_answer_alone_and_in_a_padded_batch(vlms):
    """Left padding: a short prompt batched with longer ones still reads its own next token."""
    processor, model, device = ask.load_judge(judge_params(vlms["random"]).model)
    texts = ["Is there a dog?", "Is there a dog sitting on a red couch near the street in this image?", "Cat?"]
    images = [IMAGES["o"], IMAGES["c"], IMAGES["o"]]
    batched = ask.p_yes(model, processor, device, images, texts, ("Yes", "No"), batch_size=3)
    alone = ask.p_yes(model, processor, device, images, texts, ("Yes", "No"), batch_size=1)
    np.testing.assert_allclose(batched, alone, atol=1e-5)


def test_the_verdict_at_its_threshold_boundaries():
    """A question counts as answered yes at P(Yes) == threshold: the expected-yes checks pass there, the crossed
    ones fail there; the reason is the first failed check."""
    thresholds = {"original_o": 0.6, "substitute_c": 0.7, "substitute_o": 0.3, "original_c": 0.4}
    rows = [(0.6, 0.7, 0.3 - 1e-9, 0.4 - 1e-9),  # every boundary on its passing side
            (0.6 - 1e-9, 0.7, 0.0, 0.0), (0.6, 0.7 - 1e-9, 0.0, 0.0),
            (0.6, 0.7, 0.3, 0.0), (0.6, 0.7, 0.0, 0.4),
            (0.0, 0.0, 1.0, 1.0)]  # every check fails: the first one is the reason
    frame = pl.DataFrame(rows, schema=list(JUDGE_COLUMNS), orient="row")
    judged = verdicts(frame, thresholds)
    assert judged["judge_pass"].to_list() == [True, False, False, False, False, False]
    assert judged["judge_reason"].to_list() == [None, "judge_original_missing", "judge_substitute_missing",
                                                "judge_substitute_in_image_o", "judge_original_in_image_c",
                                                "judge_original_missing"]


def selected_pairs(root: Path) -> tuple[pl.DataFrame, Path]:
    """Three selected noun pairs and their PNGs in a store under root/img."""
    rng = np.random.default_rng(0)
    words = [("dog", "cat"), ("car", "bus"), ("horse", "bike")]
    rows = [{**dict.fromkeys(SELECTED), "caption_id": f"{j}_0", "image_id": str(j), "edit_type": "noun",
             "caption": f"a {o} in a room", "counterfactual": f"a {c} in a room", "original_word": o,
             "substitute": c, "sample": 0, "seed": j, "p2p_fraction": 0.5, "guidance_scale": 7.5,
             **{f"image_{side}": store.write_png(root / "img", rng.integers(
                 0, 256, (32, 32, 3), dtype=np.uint8)) for side in "oc"}} for j, (o, c) in enumerate(words)]
    return pl.DataFrame(rows, schema=SELECTED), root / "img"


def flow_params(root: Path):
    """The project's params with every judge input and output under `root` (three selected pairs, no export)."""
    selected, images = selected_pairs(root)
    write_frame(selected, root / "selected.parquet")
    base = project_params()
    return base.model_copy(update={"paths": base.paths.model_copy(update={
        "selected": root / "selected.parquet", "selected_images": images, "judged": root / "judged.parquet",
        "metrics": root / "metrics", "plots": root / "plots", "labelstudio_export": root / "no_export.json"})})


def test_the_flow_asks_each_pair_once_and_a_threshold_change_re_asks_nothing(tmp_path, vlms, result_store):
    base = flow_params(tmp_path)
    selected, images = pl.read_parquet(tmp_path / "selected.parquet"), base.paths.selected_images

    def run(model: str = "random", **update) -> dict:
        metrics = judge_flow(base.model_copy(update={"judge": judge_params(vlms[model], **update)}))
        assert json.loads((tmp_path / "metrics/judge.json").read_text()) == facts(metrics)  # counters: run log
        assert json.loads(run_log(tmp_path / "metrics/judge.json").read_text()) == metrics
        return metrics

    first = run()
    judged = pl.read_parquet(tmp_path / "judged.parquet")
    assert dict(judged.schema) == JUDGED and judged["caption_id"].to_list() == ["0_0", "1_0", "2_0"]
    assert (first["pairs_asked"], first["pairs_cached"]) == (3, 0)
    assert (tmp_path / "plots/judge_roc.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "plots/judge_roc.csv").is_file()

    loose = run(thresholds={"original_o": 0.0, "substitute_c": 0.0, "substitute_o": 1.0, "original_c": 1.0})
    assert (loose["pairs_asked"], loose["pairs_cached"]) == (0, 3)
    assert loose["rows_out"] == 3 and loose["rejects"] == {}
    assert pl.read_parquet(tmp_path / "judged.parquet").select(JUDGE_COLUMNS).equals(judged.select(JUDGE_COLUMNS))

    strict = run(thresholds=dict.fromkeys(("original_o", "substitute_c", "substitute_o", "original_c"), 1.0))
    assert strict["pairs_asked"] == 0 and strict["rejects"] == {"judge_original_missing": 3}
    rejects = pl.read_parquet(tmp_path / "judged.rejects.parquet")
    assert rejects["reason"].to_list() == ["judge_original_missing"] * 3 and set(rejects["stage"]) == {"judge"}

    noun = {**base.judge.templates, "noun": "Can you see a {word}? Answer yes or no."}
    assert run(templates=noun)["pairs_asked"] == 3  # another question
    assert run(templates={**noun, "lexical": "Is it {word}?"})["pairs_asked"] == 0  # no pair asked it
    assert run("yes", templates=noun)["pairs_asked"] == 3  # another model
    assert run("yes", templates=noun, batch_size=1)["pairs_asked"] == 0  # not in the key

    repainted = store.write_png(images, np.zeros((32, 32, 3), dtype=np.uint8))  # other pixels, another name
    write_frame(selected.with_columns(image_o=pl.when(pl.col("caption_id") == "0_0").then(pl.lit(repainted))
                                      .otherwise("image_o")), tmp_path / "selected.parquet")
    assert run("yes", templates=noun)["pairs_asked"] == 1  # another image


def test_disabled_the_stage_lists_every_pair_with_null_answers(tmp_path, result_store):
    base = flow_params(tmp_path)
    metrics = judge_flow(base.model_copy(update={"judge": base.judge.model_copy(
        update={"enabled": False, "model": base.judge.model.model_copy(update={"id": "no/such-model"})})}))
    judged = pl.read_parquet(tmp_path / "judged.parquet")
    assert judged.height == 3 and judged["judge_pass"].null_count() == 3
    assert metrics["enabled"] is False and metrics["pairs_asked"] == 0 and metrics["rejects"] == {}
    assert pl.read_parquet(tmp_path / "judged.rejects.parquet").height == 0
