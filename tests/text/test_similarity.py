"""Similarity window on the real all-MiniLM-L6-v2: cosine values, (lower, upper] boundaries, embed-once, too long."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from tasks.core.specs import ModelSpec
from tasks.text import candidates, similarity
from tasks.text.params import SimilarityParams
from tests.conftest import MINILM

# The widest valid window (the params refuse bounds outside [-1, 1]): every cosine of two distinct sentences is in it.
WIDE = {"lower": -1.0, "upper": 1.0}
EDITS = [  # (caption_id, caption, original word, substitute)
    ("d_0", "A dog runs in the park.", "dog", "cat"),
    ("d_0", "A dog runs in the park.", "dog", "car"),
    ("d_0", "A dog runs in the park.", "dog", "child"),
    ("d_0", "A dog runs in the park.", "park", "garden"),
    ("d_0", "A dog runs in the park.", "park", "kitchen"),
    ("m_0", "A man riding a bicycle down a city street.", "bicycle", "horse"),
    ("m_0", "A man riding a bicycle down a city street.", "street", "beach"),
    ("m_0", "A man riding a bicycle down a city street.", "man", "woman"),
    ("c_0", "Two cats sleep on a sofa.", "cats", "dogs"),
    ("c_0", "Two cats sleep on a sofa.", "sofa", "bed"),
    ("k_0", "A cat runs in the park.", "cat", "dog"),  # candidate == caption of d_0: one sentence, embedded once
    ("k_0", "A cat runs in the park.", "park", "yard"),
]


def edit_row(caption_id: str, caption: str, word: str, substitute: str, score: float = 0.1) -> dict:
    start = caption.index(word)
    end = start + len(word)
    return {"caption_id": caption_id, "image_id": caption_id.rsplit("_", 1)[0], "caption": caption,
            "position": len(caption[:start].split()), "start": start, "end": end, "original_word": word,
            "substitute": substitute, "mlm_score": score, "candidate": caption[:start] + substitute + caption[end:]}


def cand_frame(edits=EDITS) -> pl.DataFrame:
    return pl.DataFrame([edit_row(*e) for e in edits], schema=candidates.SCHEMA)


@pytest.fixture(scope="module")
def base_params() -> SimilarityParams:
    return SimilarityParams(model=ModelSpec(id=MINILM), batch_size=4)


@pytest.fixture(scope="module")
def encoder(base_params):
    return similarity.load_models(base_params)


def params(base: SimilarityParams, **window) -> SimilarityParams:
    return SimilarityParams(**{**base.model_dump(), **window})


def test_window_outside_the_cosine_range_is_refused(base_params):
    for window in ({"lower": -1.5}, {"upper": 1.5}, {"lower": 0.9, "upper": 0.9}):
        with pytest.raises(ValueError):
            params(base_params, **window)


@pytest.fixture(scope="module")
def wide_run(encoder, base_params):
    return similarity.run(cand_frame(), params(base_params, **WIDE), encoder)


def check_accounting(frame: pl.DataFrame, kept: pl.DataFrame, rejects: pl.DataFrame) -> None:
    assert list(kept.schema.items()) == list(similarity.SCHEMA.items())
    assert list(rejects.schema.items()) == list(similarity.REJECTS_SCHEMA.items())
    assert kept.height + rejects.height == frame.height
    key = ["caption_id", "position", "substitute"]
    assert pl.concat([kept.select(key), rejects.select(key)]).sort(key).equals(frame.select(key).sort(key))
    assert set(rejects["stage"]) <= {"similarity"}


# --- window_reason ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sim", "reason"), [
    (0.5, "below_window"),
    (0.8, "below_window"),                              # lower is exclusive
    (math.nextafter(0.8, 1.0), None),
    (0.85, None),
    (0.91, None),                                       # upper is inclusive
    (math.nextafter(0.91, 1.0), "above_window"),
    (1.0, "above_window"),
    (-1.0, "below_window"),
])
def test_window_reason(sim, reason):
    assert similarity.window_reason(sim, 0.8, 0.91) == reason


# --- cosine and run --------------------------------------------------------------------------------------------------


def test_wide_window_keeps_everything_with_correct_cosine(encoder, wide_run):
    frame = cand_frame()
    kept, rejects = wide_run
    check_accounting(frame, kept, rejects)
    assert rejects.is_empty()
    assert kept.drop("similarity").equals(frame)  # rows and order untouched
    emb = encoder.encode(frame["caption"].to_list() + frame["candidate"].to_list(), convert_to_numpy=True)
    emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    direct = (emb[:frame.height] * emb[frame.height:]).sum(1)
    np.testing.assert_allclose(kept["similarity"].to_numpy(), direct, atol=1e-5)
    # d_0 "dog -> cat" and k_0 "cat -> dog" are the same pair of sentences, swapped.
    assert kept["similarity"][0] == kept["similarity"][10]


def test_cosine_of_identical_and_swapped_pairs(encoder):
    a, b = "A dog runs in the park.", "A cat sleeps on a sofa."
    same, ab, ba = similarity.cosine(encoder, [(a, a), (a, b), (b, a)], batch_size=8)
    assert same == pytest.approx(1.0, abs=1e-5)
    assert ab == ba and ab < 0.9


def test_each_unique_sentence_embedded_once(monkeypatch, encoder, base_params):
    frame = cand_frame()
    calls: list[list[str]] = []
    original = encoder.encode

    def spy(sentences, *args, **kwargs):
        calls.append(list(sentences))
        return original(sentences, *args, **kwargs)

    monkeypatch.setattr(encoder, "encode", spy)
    kept, _ = similarity.run(frame, params(base_params, **WIDE), encoder)
    unique = set(frame["caption"]) | set(frame["candidate"])
    assert sum(len(set(call)) for call in calls) == len(unique) < 2 * frame.height  # a call's repeats: its padding
    assert {s for call in calls for s in call} == unique
    assert kept.height == frame.height


def expected_reason(sim: float, lower: float, upper: float) -> str | None:
    return "below_window" if sim <= lower else "above_window" if sim > upper else None


def test_window_boundaries_through_run(encoder, base_params, wide_run):
    """lower and upper set to observed similarities: rows at `lower` are below, rows at `upper` are kept."""
    frame = cand_frame()
    sims = wide_run[0]["similarity"].to_list()
    values = sorted(set(sims))
    assert len(values) >= 8
    for lower, upper in [(values[2], values[-3]), (values[2], values[3]), (values[0], values[-1]),
                         (values[3], values[4])]:
        kept, rejects = similarity.run(frame, params(base_params, lower=lower, upper=upper), encoder)
        check_accounting(frame, kept, rejects)
        got = {(r["caption_id"], r["substitute"]): (r["similarity"], None) for r in kept.iter_rows(named=True)}
        got |= {(r["caption_id"], r["substitute"]): (r["similarity"], r["reason"])
                for r in rejects.iter_rows(named=True)}
        want = {(c, sub): (s, expected_reason(s, lower, upper))
                for c, sub, s in zip(frame["caption_id"], frame["substitute"], sims)}
        assert got == want  # same sentences, same batches: the floats are reproduced exactly
        assert lower not in kept["similarity"].to_list()
        assert upper in kept["similarity"].to_list()
        assert dict(zip(rejects["similarity"], rejects["reason"]))[lower] == "below_window"
        assert all(lower < s <= upper for s in kept["similarity"])
    # Just above the top of the window: above_window.
    kept, rejects = similarity.run(frame, params(base_params, lower=values[0], upper=values[-2]), encoder)
    assert dict(zip(rejects["similarity"], rejects["reason"]))[values[-1]] == "above_window"


# --- length limit ----------------------------------------------------------------------------------------------------


def n_wordpieces(encoder, text: str) -> int:
    return len(encoder.tokenizer(text)["input_ids"])


def test_too_long_rows_are_rejected_and_others_unaffected(encoder, base_params, wide_run):
    long_caption = "A dog runs in the park" + ", and a cat runs in the park" * 40 + "."
    long_rows = [("l_0", long_caption, "dog", "cat"), ("l_0", long_caption, "park", "garden")]
    assert n_wordpieces(encoder, long_caption) > encoder.max_seq_length
    frame = cand_frame(EDITS[:5] + long_rows + EDITS[5:])
    kept, rejects = similarity.run(frame, params(base_params, **WIDE), encoder)
    check_accounting(frame, kept, rejects)
    assert rejects.select("caption_id", "substitute", "reason", "stage").rows() == [
        ("l_0", "cat", "too_long_for_similarity", "similarity"),
        ("l_0", "garden", "too_long_for_similarity", "similarity")]
    assert rejects["similarity"].null_count() == 2
    base = wide_run[0]
    assert kept.drop("similarity").equals(base.drop("similarity"))
    np.testing.assert_allclose(kept["similarity"].to_numpy(), base["similarity"].to_numpy(), atol=1e-6)


def test_length_limit_is_exact_and_matches_encoder_truncation(monkeypatch, encoder, base_params):
    """max_seq_length counts [CLS]/[SEP]: 256 wordpieces are embedded whole (kept); 257 would be truncated."""
    limit = encoder.max_seq_length
    fits = " ".join(["a"] * (limit - 2))
    over = " ".join(["a"] * (limit - 1))
    assert (n_wordpieces(encoder, fits), n_wordpieces(encoder, over)) == (limit, limit + 1)
    frame = cand_frame([("f_0", fits, "a", "the"), ("o_0", over, "a", "the")])
    kept, rejects = similarity.run(frame, params(base_params, **WIDE), encoder)
    assert kept["caption_id"].to_list() == ["f_0"]
    assert rejects.select("caption_id", "reason").rows() == [("o_0", "too_long_for_similarity")]

    at_limit = encoder.encode([fits, over], convert_to_numpy=True)
    monkeypatch.setattr(encoder, "max_seq_length", 512)
    whole = encoder.encode([fits, over], convert_to_numpy=True)
    np.testing.assert_allclose(at_limit[0], whole[0], atol=1e-5)     # nothing cut at exactly the limit
    assert not np.allclose(at_limit[1], whole[1], atol=1e-5)         # one more wordpiece is cut


def test_frame_of_only_too_long_rows(encoder, base_params):
    """A shard whose every row is too long: all rejects, no crash."""
    long_caption = "A dog runs in the park" + ", and a cat runs in the park" * 40 + "."
    frame = cand_frame([("l_0", long_caption, "dog", "cat"), ("l_0", long_caption, "park", "yard")])
    kept, rejects = similarity.run(frame, params(base_params, **WIDE), encoder)
    check_accounting(frame, kept, rejects)
    assert kept.is_empty()
    assert set(rejects["reason"]) == {"too_long_for_similarity"}



def test_an_edit_type_with_its_own_upper_bound_keeps_what_the_shared_one_drops(encoder, base_params):
    """A swap keeps every word: the real MiniLM puts it above the shared window, its own upper bound keeps it."""
    caption, swapped = "A dog on a couch.", "A couch on a dog."
    frame = cand_frame([("s_0", caption, "dog on a couch", "couch on a dog")] * 2).with_columns(
        edit_type=pl.Series(["noun", "swap"]))
    assert frame["candidate"].to_list() == [swapped] * 2
    kept, rejects = similarity.run(frame, params(base_params, lower=0.8, upper=0.91), encoder)
    assert kept["edit_type"].to_list() == ["swap"] and rejects["reason"].to_list() == ["above_window"]
    assert kept["similarity"][0] > 0.91
