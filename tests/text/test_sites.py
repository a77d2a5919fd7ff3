"""Edit sites: noun sites are exactly the NN/NNS tokens of `nltk.word_tokenize`, with character spans into the
untouched caption; every other type's spans are checked on hand-made captions."""

from __future__ import annotations

import nltk
import polars as pl
import pytest

from tasks.text import sites as stage
from tasks.text.ingest import read_captions
from tasks.text.params import SitesParams
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
    return stage.run(demo_frame, SitesParams())


def check_sites(captions: pl.DataFrame, sites: pl.DataFrame, tags=("NN", "NNS")) -> None:
    assert dict(sites.schema) == stage.SCHEMA
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
    sites, rejects = stage.run(captions, SitesParams())
    check_sites(captions, sites)
    assert rejects.is_empty()


def test_double_quotes_shift_later_spans_correctly():
    caption = 'A sign that says "stop" near a car.'
    sites, _ = stage.run(frame([caption]), SitesParams())
    assert "``" in nltk.word_tokenize(caption)
    assert sites.select("position", "start", "end", "original_word").rows() == [
        (1, 2, 6, "sign"), (9, 31, 34, "car")]


def test_quote_at_caption_start():
    sites, _ = stage.run(frame(['"Dogs" run in the park.']), SitesParams())
    assert sites.select("position", "start", "end", "original_word").rows()[0] == (1, 1, 5, "Dogs")


def test_apostrophe_and_repeated_words_get_their_own_spans():
    caption = "A dog's bowl and a dog."
    sites, _ = stage.run(frame([caption]), SitesParams())
    assert sites.select("position", "start", "end", "original_word").rows() == [
        (1, 2, 5, "dog"), (3, 8, 12, "bowl"), (6, 19, 22, "dog")]
    assert nltk.word_tokenize(caption)[2] == "'s"


def test_three_identical_words():
    caption = "A dog chases another dog past a dog."
    sites, _ = stage.run(frame([caption]), SitesParams())
    dogs = sites.filter(pl.col("original_word") == "dog")
    assert dogs["start"].to_list() == [2, 21, 32]
    assert all(caption[s:e] == "dog" for s, e in zip(dogs["start"], dogs["end"]))


def test_positions_span_sentences():
    caption = "A cat. A dog."
    sites, _ = stage.run(frame([caption]), SitesParams())
    assert sites.select("position", "start", "original_word", "n_tokens").rows() == [
        (1, 2, "cat", 6), (4, 9, "dog", 6)]


def test_caption_without_site_is_a_reject():
    captions = pl.DataFrame({"caption_id": ["n_0", "y_0"], "image_id": ["n", "y"], "caption": ["He sat.", "A dog."]})
    sites, rejects = stage.run(captions, SitesParams())
    assert dict(rejects.schema) == stage.REJECTS_SCHEMA
    assert rejects.rows() == [("n_0", "n", "He sat.", "no_site")]
    assert set(sites["caption_id"]) == {"y_0"}


def test_a_caption_over_max_tokens_is_a_reject_and_costs_no_site():
    """A caption of 3,000 words (a pasted document) is one `too_long` reject, not thousands of sites; one at the bound
    is kept."""
    long = "A dog sits on a red mat near a cat and " * 300 + "a horse."
    at_bound = " ".join(["dog"] * 9) + "."  # 10 tokens
    captions = pl.DataFrame({"caption_id": ["l_0", "b_0", "y_0"], "image_id": ["l", "b", "y"],
                             "caption": [long, at_bound, "A dog."]})
    sites, rejects = stage.run(captions, SitesParams(types=("noun", "lexical", "insert"), max_tokens=10))
    assert rejects.select("caption_id", "reason").rows() == [("l_0", "too_long")]
    assert set(sites["caption_id"]) == {"b_0", "y_0"}


def test_tags_param_selects_sites():
    caption = "Dogs chase a cat in the park."
    sites, rejects = stage.run(frame([caption]), SitesParams(noun_tags=("NNS",)))
    assert sites["original_word"].to_list() == ["Dogs"]
    sites, rejects = stage.run(frame(["A dog."]), SitesParams(noun_tags=("NNS",)))
    assert sites.is_empty() and rejects["reason"].to_list() == ["no_site"]


def test_empty_frame():
    sites, rejects = stage.run(frame([]), SitesParams())
    assert sites.is_empty() and rejects.is_empty()
    assert dict(sites.schema) == stage.SCHEMA


ALL = SitesParams(types=("noun", "lexical", "quantifier", "insert", "delete"))


def spans(caption: str, edit_type: str, params: SitesParams = ALL) -> list[tuple[int, str, str]]:
    found, _ = stage.run(frame([caption]), params)
    rows = found.filter(pl.col("edit_type") == edit_type)
    assert all(caption[r["start"]:r["end"]] == r["original_word"] for r in rows.iter_rows(named=True))
    return rows.select("position", "original_word", "tag").rows()


def test_only_the_types_asked_for_run():
    found, _ = stage.run(frame(["Two brown dogs sleep on the couch."]), SitesParams())
    assert set(found["edit_type"]) == {"noun"}
    found, _ = stage.run(frame(["Two brown dogs sleep on the couch."]), ALL)
    assert set(found["edit_type"]) == set(ALL.types)


def test_lexical_sites_are_adjectives_and_verbs_but_not_auxiliaries():
    assert spans("Two brown dogs are sleeping on the couch.", "lexical") == [(1, "brown", "JJ"),
                                                                           (4, "sleeping", "VBG")]


def test_quantifier_spans_run_from_the_count_to_the_last_noun():
    assert spans("Two brown dogs near a tennis racket.", "quantifier") == [
        (0, "Two brown dogs", "CD"), (4, "a tennis racket", "DT")]
    assert spans("The dog sat.", "quantifier") == []  # `the` counts nothing
    assert spans("A very big dog.", "quantifier") == []  # an adverb between: not a counted phrase


def test_insert_sites_are_empty_spans_before_each_noun():
    found, _ = stage.run(frame(["A dog on a mat."]), ALL)
    rows = found.filter(pl.col("edit_type") == "insert").select("position", "start", "end", "original_word").rows()
    assert rows == [(1, 2, 2, ""), (4, 11, 11, "")]


def test_delete_sites_are_attributive_adjectives_and_prepositional_phrases():
    assert spans("A brown dog sleeps on the old couch.", "delete") == [
        (1, "brown ", "JJ"), (6, "old ", "JJ"), (4, " on the old couch", "IN")]
    assert spans("A red and white bus.", "delete") == []  # inside a coordination
    assert spans("In a kitchen a woman cooks.", "delete") == []  # a phrase that opens the caption stays
    assert spans("A slice of pizza.", "delete") == []  # kept_prepositions


@pytest.mark.parametrize(("caption", "adjectives"), [
    # `kitchen` is tagged JJ, but WordNet knows it only as a noun: the head of `a kitchen`, before the verb `start`.
    ("a bunch of people in a kitchen start to prepare food", []),
    ("A large red bus.", [(1, "large ", "JJ"), (2, "red ", "JJ")]),  # adjectives, then the noun they modify
    ("A table full of food.", []),  # followed by a preposition: not attributive
    ("The bus is large and red.", []),
])
def test_an_adjective_delete_is_followed_by_the_noun_it_modifies(caption, adjectives):
    assert [site for site in spans(caption, "delete") if site[2] == "JJ"] == adjectives


def test_a_caption_with_sites_of_other_types_only_is_not_rejected():
    found, rejects = stage.run(frame(["He runs quickly."]), SitesParams(types=("noun", "lexical")))
    assert found["edit_type"].to_list() == ["lexical"] and rejects.is_empty()
