"""The evaluate stage on three selected pairs: retrieval sets (all, validated, real + relative change), the filter
model flagged, Δ rows per pair and model, cross-encoder re-ranking, images read a batch at a time, a missing image
as one line before any model loads."""

from __future__ import annotations

import weakref

import numpy as np
import polars as pl
import pytest

from tasks.core.errors import UserError
from tasks.core.images import read_rgb, source_image_paths
from tasks.evaluation import evaluate
from tasks.evaluation.params import EvaluateParams
from tasks.evaluation.retrieval import RetrievalSet
from tasks.evaluation.scorers import BiEncoder, CrossEncoder, Images, load_scorer
from tests.evaluation.fixtures import CAPTIONS, dense_recall, selected_pairs, truth_matrix

pytest_plugins = ["tests.evaluation.fixtures"]


@pytest.fixture
def world(tmp_path, eval_specs):
    selected, images, real = selected_pairs(tmp_path)
    real_paths = source_image_paths(selected["image_id"], real, "{image_id:0>12}.jpg")
    return selected, EvaluateParams(models=eval_specs, ks=(1, 5), batch_size=4), images, real_paths


def dense(spec, rs: RetrievalSet, images, ks) -> dict[str, float]:
    """R@k as before streaming: every image in memory, every (caption, image) pair scored, whole rows sorted."""
    scorer, pixels = load_scorer(spec, 4), {k: read_rgb(images / k) for k in rs.images}
    texts = [c for c in rs.captions for _ in rs.images]
    keys = Images(tuple(rs.images) * len(rs.captions), pixels.__getitem__)
    model = scorer.embed(texts, keys) if isinstance(scorer, BiEncoder) else scorer
    scores = model.pairs(texts, keys).reshape(len(rs.captions), len(rs.images))
    truth = truth_matrix(rs)
    return {**{f"text_r@{k}": v for k, v in dense_recall(scores.T, truth.T, ks).items()},
            **{f"image_r@{k}": v for k, v in dense_recall(scores, truth, ks).items()}}


def pairs_of(selected: pl.DataFrame) -> list[tuple[str, str]]:
    return [p for r in selected.iter_rows(named=True) for p in ((r["caption"], r["image_o"]),
                                                                (r["counterfactual"], r["image_c"]))]


def test_every_model_gets_every_retrieval_set_and_its_deltas(world, eval_specs):
    selected, params, images, real = world
    metrics, deltas = evaluate.run(selected, params, images, real, validated=["0_0", "2_0", "gone"],
                                   filter_clip=eval_specs["clip"])
    assert (metrics["pairs"], metrics["real_images"], metrics["validated_pairs"]) == (3, 2, 2)
    assert {name: m["used_to_filter"] for name, m in metrics["models"].items()} == {
        "clip": True, "hf_clip": False, "vilt": False, "bridgetower": False}
    assert deltas.height == 3 * len(eval_specs) and set(deltas["model"]) == set(eval_specs)
    for name, m in metrics["models"].items():
        assert set(m) == {"all", "validated", "real", "relative", "itm", "used_to_filter"}
        assert set(m["all"]) == {"text_r@1", "text_r@5", "image_r@1", "image_r@5"}
        for key, value in m["all"].items():
            base = m["real"][key]
            assert m["relative"][key] == (pytest.approx((value - base) / base) if base else None)
    # the validated set is pairs 0 and 2 only: recompute it with the model directly
    chosen = selected.filter(pl.col("caption_id").is_in(["0_0", "2_0"]))
    rs = RetrievalSet.of(pairs_of(chosen))
    assert metrics["models"]["hf_clip"]["validated"] == dense(eval_specs["hf_clip"], rs, images, (1, 5))


@pytest.mark.parametrize("rerank_k", [None, 6, 50])  # every pair, the whole set (6 candidates), more than it
def test_a_cross_encoder_reranking_every_candidate_is_its_dense_recall(world, eval_specs, rerank_k):
    selected, _, images, _ = world
    # BridgeTower: the tiny ViLT samples image patches at random, so two runs of it never agree
    models = {"hf_clip": eval_specs["hf_clip"], "bridgetower": eval_specs["bridgetower"]}
    params = EvaluateParams(models=models, ks=(1, 2, 5), batch_size=4, rerank_k=rerank_k)
    metrics, _ = evaluate.run(selected, params, images)
    expected = dense(eval_specs["bridgetower"], RetrievalSet.of(pairs_of(selected)), images, (1, 2, 5))
    assert metrics["models"]["bridgetower"]["all"] == expected


@pytest.mark.parametrize("rerank_k", [None, 1])
def test_a_cross_encoder_scores_the_bi_encoders_top_k_and_the_deltas_once_in_one_call(world, eval_specs, monkeypatch,
                                                                                       rerank_k):
    selected, _, images, _ = world
    calls = []
    monkeypatch.setattr(CrossEncoder, "pairs", lambda self, texts, images: calls.append(list(zip(texts, images.keys)))
                        or np.zeros(len(texts), np.float32))
    models = {"hf_clip": eval_specs["hf_clip"], "vilt": eval_specs["vilt"]}
    evaluate.run(selected, EvaluateParams(models=models, ks=(1,), batch_size=4, rerank_k=rerank_k), images)
    (scored,) = calls
    assert len(set(scored)) == len(scored)
    rows = selected.rows(named=True)
    fixed = {(r[c], r[i]) for r in rows for c, i in (("counterfactual", "image_c"), ("counterfactual", "image_o"),
                                                      ("caption", "image_c"))}  # Δ_c pairs (Δ_r's are drawn)
    assert fixed <= set(scored)
    # `all`: 6 captions × 6 images, 36 pairs; with each query's top 1 (both directions) 6 to 12, and the ≤ 6 × 3
    # ITM pairs outside them
    assert len(scored) == 36 if rerank_k is None else len(scored) <= 12 + 6 * 3


@pytest.mark.parametrize("normalisation", ["relevant", "k"])
def test_odmap_reports_both_normalisations_and_the_param_picks_the_headline(world, eval_specs, normalisation):
    selected, _, images, _ = world
    queries = pl.DataFrame({"image_1": selected["image_o"], "removed": [["dog"], ["car"], ["man"]],
                            "remaining": [["couch"], ["street"], ["horse"]]})
    gallery = pl.DataFrame({"caption": CAPTIONS, "classes": [["dog", "couch"], ["cat", "couch"], ["car", "street"],
                                                             ["bus", "street"], ["man", "horse"], ["man", "bike"]]})
    params = EvaluateParams(models={"clip": eval_specs["clip"]}, ks=(1, 5), odmap_normalisation=normalisation)
    got = evaluate.od_map(eval_specs["clip"], queries, gallery, evaluate.reader(images), params)
    by = got["odmap_by_normalisation"]
    assert set(by) == {"relevant", "k"} and got["odmap"] == by[normalisation]
    assert by["relevant"]["odmap@1"] == by["k"]["odmap@1"]  # one caption: both divide by 1
    assert by["relevant"]["odmap@5"] >= by["k"]["odmap@5"]  # at most k relevant captions in the top k


def test_images_are_read_a_batch_at_a_time_and_embedded_once(world, eval_specs, monkeypatch):
    selected, _, images, real = world
    reads, live, most = [], set(), []

    def read(path):
        pixels = read_rgb(path)
        reads.append(path)
        live.add(id(pixels))
        weakref.finalize(pixels, live.discard, id(pixels))
        most.append(len(live))
        return pixels

    monkeypatch.setattr(evaluate, "read_rgb", read)
    for name in ("hf_clip", "clip"):
        reads.clear()
        evaluate.run(selected, EvaluateParams(models={name: eval_specs[name]}, batch_size=4), images, real)
        unique = {*(images / k for k in (*selected["image_o"], *selected["image_c"])), *real[:2]}
        assert sorted(reads) == sorted(p.absolute() for p in unique)  # 8 images, each read once
    reads.clear()
    models = {"hf_clip": eval_specs["hf_clip"], "vilt": eval_specs["vilt"]}
    evaluate.run(selected, EvaluateParams(models=models, batch_size=4, rerank_k=2), images, real)
    assert max(most) <= 4  # every model, cross-encoder included, holds at most one batch of pixels


def test_a_missing_image_is_one_line_before_any_model_loads(world, monkeypatch):
    selected, params, images, real = world
    monkeypatch.setattr(evaluate, "load_scorer", lambda *args: pytest.fail("a model loaded"))
    (images / selected["image_c"][1]).unlink()
    with pytest.raises(UserError, match="does not exist") as err:
        evaluate.run(selected, params, images)
    assert "\n" not in str(err.value)
    real[0].unlink()
    with pytest.raises(UserError, match=real[0].name):
        evaluate.run(selected.slice(0, 1), params, images, real[:1])


def test_without_real_images_or_validation_those_sets_are_absent(world):
    selected, params, images, _ = world
    metrics, _ = evaluate.run(selected, params, images)
    assert set(metrics["models"]["vilt"]) == {"all", "itm", "used_to_filter"}
    assert metrics["validated_pairs"] is None and metrics["real_images"] == 0
