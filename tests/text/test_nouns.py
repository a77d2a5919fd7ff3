"""Noun sites: exactly the NN/NNS tokens of `nltk.word_tokenize`, with character spans into the untouched caption."""

from __future__ import annotations

import nltk
import polars as pl
import pytest

from tasks.core.params import NounsParams
from tasks.text import nouns
from tasks.text.ingest import read_captions
from tests.conftest import DEMO_CAPTIONS, requires_nltk

pytestmark = requires_nltk

TRICKY = [
    'A sign that says "stop" near a car.',
    '"Dogs" run in the park.',
    'A dog said "hi" and "bye" to a cat.',
    'He said ""dog"" twice to the cat.',
    "A ``fancy'' dog and a cat.",
    "A dog's bowl and a dog.",
    "A man's dog's bone near two dogs' toys.",
    "It's a dog-friendly park with cats.",
    "A dog chases another dog past a dog.",
    "A man, a plan, a canal: Panama!",
    "A dog; a cat? A bird! (And a hat) [a box] {a toy}.",
    "A cat... and a dog--and a cow.",
    "A cat. A dog. A cow.",
    "  A   dog  sits.  ",
    "A dog\tand a cat.",
    "A \u201cfancy\u201d dog near a caf\u00e9 table.",
    "The dog cannot swim, gonna sink in the lake.",
    "A 5-year-old kid with 3 dogs.",
    'A sign reading "NO PARKING" by cars.',
    "A dog ''sits'' on the mat.",  # '' after a space: word_tokenize rewrites it as ``
]


def frame(captions: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"caption_id": [f"t_{i}" for i in range(len(captions))],
                         "image_id": ["t"] * len(captions), "caption": captions})


def expected_sites(caption: str, tags=("NN", "NNS")) -> list[tuple[int, str, str]]:
    tokens = nltk.word_tokenize(caption)
    return [(i, w, t) for i, (w, t) in enumerate(nltk.pos_tag(tokens)) if t in tags]


@pytest.fixture(scope="module")
def demo_frame() -> pl.DataFrame:
    return read_captions(DEMO_CAPTIONS)[0]


@pytest.fixture(scope="module")
def demo_sites(demo_frame):
    return nouns.run(demo_frame, NounsParams())


def check_sites(captions: pl.DataFrame, sites: pl.DataFrame, tags=("NN", "NNS")) -> None:
    assert dict(sites.schema) == nouns.SCHEMA
    by_caption = {cid: [] for cid in captions["caption_id"]}
    for row in sites.iter_rows(named=True):
        by_caption[row["caption_id"]].append(row)
    for cid, caption in zip(captions["caption_id"], captions["caption"]):
        got = by_caption[cid]
        tokens = nltk.word_tokenize(caption)
        assert [(r["position"], r["original_word"], r["tag"]) for r in got] == expected_sites(caption, tags), caption
        for r in got:
            assert r["caption"] == caption
            assert caption[r["start"]:r["end"]] == r["original_word"], (caption, r)
            assert tokens[r["position"]] == r["original_word"]
            assert r["n_tokens"] == len(tokens)
        starts = [r["start"] for r in got]
        assert starts == sorted(starts) and len(set(starts)) == len(starts)


def test_demo_sites_are_exactly_nn_nns_with_exact_spans(demo_frame, demo_sites):
    sites, rejects = demo_sites
    assert demo_frame.height == 100
    check_sites(demo_frame, sites)
    assert set(sites["tag"]) <= {"NN", "NNS"}
    # ids carried through; every caption either has a site or is a reject.
    assert set(sites["caption_id"]) | set(rejects["caption_id"]) == set(demo_frame["caption_id"])
    image_of = dict(zip(demo_frame["caption_id"], demo_frame["image_id"]))
    assert all(image_of[c] == i for c, i in zip(sites["caption_id"], sites["image_id"]))


@pytest.mark.parametrize("caption", TRICKY)
def test_tricky_caption_spans(caption):
    captions = frame([caption])
    sites, rejects = nouns.run(captions, NounsParams())
    check_sites(captions, sites)
    assert rejects.is_empty()


def test_double_quotes_shift_later_spans_correctly():
    caption = 'A sign that says "stop" near a car.'
    sites, _ = nouns.run(frame([caption]), NounsParams())
    assert "``" in nltk.word_tokenize(caption)
    assert sites.select("position", "start", "end", "original_word").rows() == [
        (1, 2, 6, "sign"), (9, 31, 34, "car")]


def test_quote_at_caption_start():
    sites, _ = nouns.run(frame(['"Dogs" run in the park.']), NounsParams())
    assert sites.select("position", "start", "end", "original_word").rows()[0] == (1, 1, 5, "Dogs")


def test_apostrophe_and_repeated_words_get_their_own_spans():
    caption = "A dog's bowl and a dog."
    sites, _ = nouns.run(frame([caption]), NounsParams())
    assert sites.select("position", "start", "end", "original_word").rows() == [
        (1, 2, 5, "dog"), (3, 8, 12, "bowl"), (6, 19, 22, "dog")]
    assert nltk.word_tokenize(caption)[2] == "'s"


def test_three_identical_words():
    caption = "A dog chases another dog past a dog."
    sites, _ = nouns.run(frame([caption]), NounsParams())
    dogs = sites.filter(pl.col("original_word") == "dog")
    assert dogs["start"].to_list() == [2, 21, 32]
    assert all(caption[s:e] == "dog" for s, e in zip(dogs["start"], dogs["end"]))


def test_positions_span_sentences():
    caption = "A cat. A dog."
    sites, _ = nouns.run(frame([caption]), NounsParams())
    assert sites.select("position", "start", "original_word", "n_tokens").rows() == [
        (1, 2, "cat", 6), (4, 9, "dog", 6)]


def test_caption_without_noun_is_a_reject():
    captions = pl.DataFrame({"caption_id": ["n_0", "y_0"], "image_id": ["n", "y"], "caption": ["He sat.", "A dog."]})
    sites, rejects = nouns.run(captions, NounsParams())
    assert dict(rejects.schema) == nouns.REJECTS_SCHEMA
    assert rejects.rows() == [("n_0", "n", "He sat.", "no_noun")]
    assert set(sites["caption_id"]) == {"y_0"}


def test_tags_param_selects_sites():
    caption = "Dogs chase a cat in the park."
    sites, rejects = nouns.run(frame([caption]), NounsParams(tags=("NNS",)))
    assert sites["original_word"].to_list() == ["Dogs"]
    sites, rejects = nouns.run(frame(["A dog."]), NounsParams(tags=("NNS",)))
    assert sites.is_empty() and rejects["reason"].to_list() == ["no_noun"]


def test_empty_frame():
    sites, rejects = nouns.run(frame([]), NounsParams())
    assert sites.is_empty() and rejects.is_empty()
    assert dict(sites.schema) == nouns.SCHEMA
