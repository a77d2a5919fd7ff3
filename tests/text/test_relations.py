"""The lexical-relation filter on the real WordNet 3.0 (`../shared/nltk_data`): each relation and its direction, the
paper's frequent error swaps, which relations `reject` names, the human-words option, and the stage's row contract."""

from __future__ import annotations

import polars as pl
import pytest
from nltk.corpus import wordnet

from tasks.core.errors import UserError
from tasks.core.schemas import CANDIDATES
from tasks.text import relations
from tasks.text.params import RelationsParams
from tests.conftest import requires_nltk

pytestmark = requires_nltk

# (original, substitute) -> relation, as WordNet 3.0 has them; the first six are swaps the paper's error analysis
# (App. A.3) names among its most frequent errors.
REAL_PAIRS = {
    ("woman", "girl"): "hyponym", ("man", "boy"): "hyponym", ("people", "men"): None, ("man", "person"): "hypernym",
    ("girl", "woman"): "hypernym", ("guy", "man"): "hypernym",
    ("car", "automobile"): "synonym", ("couch", "sofa"): "synonym", ("kid", "child"): "synonym",
    ("table", "desk"): "hyponym", ("animal", "dog"): "hyponym", ("street", "road"): "hypernym",
    ("women", "girls"): "hyponym", ("Woman", "Girl"): "hyponym",  # plural forms and case
    ("man", "woman"): None, ("boy", "girl"): None, ("dog", "cat"): None, ("bus", "truck"): None,
    ("pizza", "sandwich"): None, ("zebra", "giraffe"): None, ("xyzzy", "dog"): None,  # not in WordNet: no relation
}


@pytest.mark.parametrize(("pair", "expected"), REAL_PAIRS.items(), ids=lambda v: "->".join(v) if v else "none")
def test_relation_and_its_direction(pair, expected):
    assert relations.relation(*pair) == expected


def test_real_pairs_rejected_by_default():
    rejected = [p for p in REAL_PAIRS if relations.reason(*p, RelationsParams())]
    assert len(rejected) == 13 and ("people", "men") not in rejected


def frame(pairs: list[tuple[str, str]]) -> pl.DataFrame:
    rows = [{"caption_id": f"c{i}", "image_id": f"i{i}", "caption": f"A {o} here.", "edit_type": "noun", "tag": "NN",
             "position": 1, "start": 2,
             "end": 2 + len(o), "original_word": o, "substitute": s, "mlm_score": -float(i),
             "candidate": f"A {s} here."} for i, (o, s) in enumerate(pairs)]
    return pl.DataFrame(rows, schema=CANDIDATES)


def test_only_the_named_relations_reject():
    pairs = [("car", "automobile"), ("woman", "girl"), ("man", "person"), ("dog", "cat")]
    kept, rejects = relations.run(frame(pairs), RelationsParams(reject=("hyponym",)))
    assert kept["substitute"].to_list() == ["automobile", "person", "cat"]
    assert rejects.select("substitute", "reason", "stage").rows() == [("girl", "hyponym", "relations")]
    kept, rejects = relations.run(frame(pairs), RelationsParams(reject=()))
    assert kept.equals(frame(pairs)) and rejects.is_empty()


def test_human_pairs_only_when_asked():
    pairs = [("people", "men"), ("men", "women"), ("man", "dog"), ("woman", "girl")]  # women: by its base form
    kept, _ = relations.run(frame(pairs), RelationsParams())
    assert kept["substitute"].to_list() == ["men", "women", "dog"]
    kept, rejects = relations.run(frame(pairs), RelationsParams(reject_human_pairs=True))
    assert kept["substitute"].to_list() == ["dog"]
    assert dict(zip(rejects["substitute"], rejects["reason"])) == {"men": "human_words", "women": "human_words",
                                                                   "girl": "hyponym"}  # a relation is named first


def test_rows_pass_unchanged_in_order_and_every_row_lands_once():
    pairs = [("dog", "cat"), ("car", "automobile"), ("bus", "truck"), ("man", "person"), ("boat", "ship")]
    source = frame(pairs)
    kept, rejects = relations.run(source, RelationsParams())
    assert kept.equals(source.filter(pl.col("substitute").is_in(["cat", "truck", "ship"])))
    assert kept.schema == relations.SCHEMA and rejects.schema == relations.REJECTS_SCHEMA
    assert sorted(kept["caption_id"].to_list() + rejects["caption_id"].to_list()) == source["caption_id"].to_list()
    empty_kept, empty_rejects = relations.run(source.clear(), RelationsParams())
    assert empty_kept.is_empty() and empty_rejects.is_empty()


def test_wordnet_version_is_checked():
    assert relations.load_models(RelationsParams()) is None
    assert wordnet.get_version() == "3.0"
    with pytest.raises(UserError, match=r"^WordNet 3\.0 found under NLTK_DATA, relations.wordnet_version is 3\.1$"):
        relations.load_models(RelationsParams(wordnet_version="3.1"))


def test_adjective_and_verb_swaps_are_checked_in_their_part_of_speech():
    assert relations.relation("big", "large", "JJ") == "synonym"
    assert relations.relation("walking", "strolling", "VBG") == "hyponym"
    assert relations.relation("red", "blue", "JJ") is None
    assert relations.relation("big", "large", "CD") is None  # no WordNet part of speech


def test_only_word_swaps_are_checked():
    rows = frame([("car", "automobile"), ("big", "large"), ("big", "large"), ("dog", "dogs")])
    rows = rows.with_columns(edit_type=pl.Series(["noun", "lexical", "delete", "quantifier"]),
                             tag=pl.Series(["NN", "JJ", "JJ", "NN"]))
    kept, rejects = relations.run(rows, RelationsParams())
    assert rejects.select("edit_type", "reason").rows() == [("noun", "synonym"), ("lexical", "synonym")]
    assert kept["edit_type"].to_list() == ["delete", "quantifier"]


def test_a_span_widened_to_its_article_is_checked_by_its_words():
    """An edit that made a / an agree carries the article in its span ("a car" -> "an automobile"): the relation is
    still found, between the words."""
    widened = frame([("a car", "an automobile"), ("an apple", "a pear")])
    kept, rejects = relations.run(widened, RelationsParams())
    assert kept["original_word"].to_list() == ["an apple"]
    assert rejects["original_word"].to_list() == ["a car"]
