"""Saliency-chosen edit sites on a tiny random Hugging Face CLIP: the score is the model's own cosine, a word's
saliency is the max over its sub-tokens of the gradient norm (checked by finite differences), the top-share rule, and
the stage's contract (no image or a low score keeps every site; otherwise only salient positions stay)."""

from __future__ import annotations

import math
from itertools import zip_longest

import numpy as np
import polars as pl
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from polars.testing import assert_frame_equal

from tasks.core.schemas import SITES, SITES_REJECTS
from tasks.demo.tiny_eval import build_tiny_hf_clip
from tasks.text import saliency
from tasks.text.params import SaliencyParams
from tasks.text.tagging import tag_caption
from tests.conftest import requires_nltk

C_O = "Two xylophonists, beside a hippopotamus, play the marimbas."
OTHER = "A man rides a red skateboard down the street."


@pytest.fixture(scope="module")
def params(tmp_path_factory) -> SaliencyParams:
    spec = build_tiny_hf_clip(tmp_path_factory.mktemp("saliency_clip"), seed=0)
    return SaliencyParams(enabled=True, model=spec.model_copy(update={"device": "cpu"}), top_share=0.3,
                          min_score=-1.0)


@pytest.fixture(scope="module")
def models(params) -> saliency.Models:
    return saliency.load_models(params)


@pytest.fixture(scope="module")
def i_o() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)


def test_models_load_once_in_eval_mode_on_their_device(params, models):
    assert saliency.load_models(params) is models
    assert not models.model.training and models.device == torch.device("cpu")
    assert models.processor.tokenizer.is_fast


def _finite_difference_norms(models: saliency.Models, image: np.ndarray, caption: str, eps: float = 1e-3):
    """(||ds/de|| of every sub-token by central differences on its embedding, their character offsets)."""
    model, processor = models.model, models.processor
    text = processor.tokenizer(caption, return_tensors="pt", return_offsets_mapping=True)
    offsets = text.pop("offset_mapping")[0].tolist()
    pixels = processor(images=Image.fromarray(image), return_tensors="pt")
    embedding = model.text_model.embeddings.token_embedding
    delta = torch.zeros(1, len(offsets), embedding.embedding_dim)
    hook = embedding.register_forward_hook(lambda module, args, output: output + delta)
    with torch.no_grad():
        e_i = F.normalize(model.get_image_features(**pixels).pooler_output, dim=-1)

        def score() -> float:
            return (F.normalize(model.get_text_features(**text).pooler_output, dim=-1) * e_i).sum().item()

        grad = torch.zeros(len(offsets), embedding.embedding_dim)
        for position in range(len(offsets)):
            for dim in range(embedding.embedding_dim):
                delta.zero_()
                delta[0, position, dim] = eps
                up = score()
                delta[0, position, dim] = -eps
                grad[position, dim] = (up - score()) / (2 * eps)
    hook.remove()
    return grad.norm(dim=-1).tolist(), offsets


@requires_nltk
def test_score_is_the_models_cosine_and_a_words_saliency_its_largest_sub_token_gradient(models, i_o):
    score, saliencies = saliency.word_saliency(models, i_o, C_O)
    inputs = models.processor(text=[C_O], images=[Image.fromarray(i_o)], return_tensors="pt")
    with torch.no_grad():
        out = models.model(**inputs)
    assert score == pytest.approx(out.logits_per_image.item() / models.model.logit_scale.exp().item(), abs=1e-5)

    norms, offsets = _finite_difference_norms(models, i_o, C_O)
    tokens = tag_caption(C_O)
    assert len(saliencies) == len(tokens)
    for token, value in zip(tokens, saliencies):
        subs = [n for n, (a, b) in zip(norms, offsets) if a < token.end and token.start < b]
        assert value == pytest.approx(max(subs), rel=1e-3), token.text
    # xylophonists is xy|lo|ph|onists: its saliency is the largest of four, neither the first, the last nor the sum
    index = [t.text for t in tokens].index("xylophonists")
    subs = [n for n, (a, b) in zip(norms, offsets) if a < tokens[index].end and tokens[index].start < b]
    assert len(subs) == 4 and max(subs) not in (subs[0], subs[-1])
    assert saliencies[index] == pytest.approx(max(subs), rel=1e-3) and saliencies[index] < sum(subs) - 1.0


@requires_nltk
def test_tokens_truncated_away_have_zero_saliency(models, i_o):
    caption = "a dog " * 45 + "on a red couch"  # 94 NLTK tokens; CLIP keeps 75 between its start and end tokens
    _, saliencies = saliency.word_saliency(models, i_o, caption)
    assert len(saliencies) == 94
    assert all(s > 0 for s in saliencies[:75]) and saliencies[75:] == [0.0] * 19


TOKENS = ["A", "dog", ",", "on", "a", "couch", "``", "2", "''", "."]  # words at 0, 1, 3, 4, 5, 7


@pytest.mark.parametrize(("saliencies", "top_share", "expected"), [
    ([1, 5, 9, 2, 3, 4, 9, 0, 9, 9], 0.3, {1, 5}),  # punctuation is never salient; k = ceil(0.3 * 6) = 2
    ([1, 5, 9, 2, 3, 4, 9, 0, 9, 9], 0.5, {1, 5, 4}),
    ([1] * 10, 0.5, {0, 1, 3}),  # ties: the earlier word
    ([1, 5, 9, 2, 3, 4, 9, 0, 9, 9], 1e-6, {1}),  # at least one word
    ([1, 5, 9, 2, 3, 4, 9, 0, 9, 9], 1.0, {0, 1, 3, 4, 5, 7}),
])
def test_salient_positions_are_the_top_share_of_words(saliencies, top_share, expected):
    assert saliency.salient_positions(saliencies, TOKENS, top_share) == expected


def test_salient_positions_count_is_exact_where_the_product_is_inexact():
    assert 0.28 * 25 > 7  # binary floats: ceil would give 8
    assert len(saliency.salient_positions(list(range(25)), [f"w{i}" for i in range(25)], 0.28)) == 7
    assert saliency.salient_positions([3.0, 1.0], [".", ","], 0.5) == set()


def _sites(image_path: str | None) -> pl.DataFrame:
    """A site on every word of C_O (with `image_path`) and of OTHER (no image), rows interleaved."""
    per_caption = []
    for caption_id, caption, path in (("0_0", C_O, image_path), ("1_0", OTHER, None)):
        tokens = tag_caption(caption)
        per_caption.append([
            {"caption_id": caption_id, "image_id": caption_id[0], "caption": caption, "edit_type": "lexical",
             "position": i, "start": t.start, "end": t.end, "original_word": t.text, "tag": t.tag,
             "n_tokens": len(tokens), "image_path": path}
            for i, t in enumerate(tokens) if any(c.isalnum() for c in t.text)])
    rows = [row for pair in zip_longest(*per_caption) for row in pair if row is not None]
    return pl.DataFrame(rows, schema={**SITES, "image_path": pl.String})


@pytest.fixture
def image_path(tmp_path, i_o) -> str:
    Image.fromarray(i_o).save(tmp_path / "i_o.png")
    return str(tmp_path / "i_o.png")


@requires_nltk
def test_a_confident_caption_keeps_only_its_salient_sites(params, models, i_o, image_path, monkeypatch):
    reads = []
    monkeypatch.setattr(saliency, "read_rgb", lambda path: reads.append(path) or i_o)
    sites = _sites(image_path)
    kept, rejects = saliency.run(sites, params, models)
    assert len(reads) == 1  # one image read for the one caption with an image

    _, saliencies = saliency.word_saliency(models, i_o, C_O)
    words = [i for i, t in enumerate(tag_caption(C_O)) if any(c.isalnum() for c in t.text)]
    top = sorted(words, key=lambda i: -saliencies[i])[:math.ceil(0.3 * len(words))]
    stays = (pl.col("caption_id") == "1_0") | pl.col("position").is_in(top)
    assert kept.columns == list(SITES)
    assert_frame_equal(kept, sites.filter(stays).drop("image_path"))
    assert kept.filter(pl.col("caption_id") == "0_0").height == 3  # ceil(0.3 * 8 words)
    assert rejects.schema == pl.Schema(SITES_REJECTS)
    assert rejects.height == len(words) - 3 and set(rejects["reason"]) == {"not_salient"}
    assert set(rejects["caption_id"]) == {"0_0"} and set(rejects["caption"]) == {C_O}


@requires_nltk
@pytest.mark.parametrize("margin", [1e-6, None])
def test_a_caption_under_min_score_or_without_image_keeps_every_site(params, models, i_o, image_path, margin):
    score, _ = saliency.word_saliency(models, i_o, C_O)
    min_score = 1.0 if margin is None else score + margin
    sites = _sites(image_path)
    kept, rejects = saliency.run(sites, params.model_copy(update={"min_score": min_score}), models)
    assert_frame_equal(kept, sites.drop("image_path"))
    assert rejects.height == 0 and rejects.schema == pl.Schema(SITES_REJECTS)
    kept, _ = saliency.run(sites, params.model_copy(update={"min_score": score - 1e-6}), models)
    assert kept.height < sites.height  # just at or above min_score, C_O is ranked

    kept, rejects = saliency.run(_sites(None), params, models)
    assert_frame_equal(kept, _sites(None).drop("image_path"))
    assert rejects.height == 0


@requires_nltk
@pytest.mark.parametrize("content", [b"", b"\x89PNG\r\n\x1a\n" + bytes(20)])
def test_a_caption_whose_image_cannot_be_decoded_is_rejected_whole_with_its_reason(params, models, i_o, tmp_path,
                                                                                   content):
    """An empty or truncated image: its caption's sites are rejects (`image_unreadable`), the others go on."""
    (tmp_path / "i_o.png").write_bytes(content)
    sites = _sites(str(tmp_path / "i_o.png"))
    kept, rejects = saliency.run(sites, params, models)
    assert_frame_equal(kept, sites.filter(pl.col("caption_id") == "1_0").drop("image_path"))
    assert set(rejects["caption_id"]) == {"0_0"} and set(rejects["reason"]) == {"image_unreadable"}
    assert kept.height + rejects.height == sites.height and rejects.schema == pl.Schema(SITES_REJECTS)


def test_no_sites_give_empty_frames(params, models):
    kept, rejects = saliency.run(pl.DataFrame(schema={**SITES, "image_path": pl.String}), params, models)
    assert kept.schema == pl.Schema(SITES) and kept.height == 0
    assert rejects.schema == pl.Schema(SITES_REJECTS) and rejects.height == 0


@requires_nltk
def test_a_phrase_site_stays_when_any_word_inside_its_span_is_salient(params, models, i_o, image_path):
    _, saliencies = saliency.word_saliency(models, i_o, C_O)
    tokens = tag_caption(C_O)
    top = saliency.salient_positions(saliencies, [t.text for t in tokens], params.top_share)
    dull = min(set(range(len(tokens))) - top)  # an anchor that is not salient
    first, last = sorted((dull, min(top)))
    phrase = {"caption_id": "0_0", "image_id": "0", "caption": C_O, "edit_type": "delete", "position": dull,
              "start": tokens[first].start, "end": tokens[last].end, "tag": tokens[dull].tag,
              "n_tokens": len(tokens), "image_path": image_path}
    rows = [{**phrase, "original_word": C_O[phrase["start"]:phrase["end"]]},  # spans a salient word
            {**phrase, "start": tokens[dull].start, "end": tokens[dull].end, "original_word": tokens[dull].text}]
    kept, rejects = saliency.run(pl.DataFrame(rows, schema={**SITES, "image_path": pl.String}), params, models)
    assert kept["original_word"].to_list() == [rows[0]["original_word"]]
    assert rejects["reason"].to_list() == ["not_salient"]
