"""Lexical-relation filter (the paper's error analysis, App. A.3): drop a substitution whose substitute and original
word name the same thing or one a kind of the other, which makes no visible counterfactual (woman -> girl).

Only word substitutions (edit types `noun` and `lexical`; a swap keeps both words) are checked, over the WordNet 3.0
synsets of both words in the part of speech of the site's tag (nouns; adjectives with their satellites; verbs),
found by NLTK's reader through `NLTK_DATA` (inflected forms by its morphy), any sense, in this order:
  synonym    the two words share a synset                                  (car -> automobile)
  hyponym    a synset of the substitute has one of the original's among its
             hypernyms, transitively, instance hypernyms included           (woman -> girl, table -> desk)
  hypernym   the other way round                                            (man -> person)
  human_words  both words are in `human_words` (compared lowercased, by WordNet base form: women = woman), when
             `reject_human_pairs` is on: the paper's list of words for people, 44% of whose swaps it judged wrong,
             many unrelated in WordNet (people -> men)
Only the relations in `reject` are rejected. Output: the candidate rows that pass, unchanged and in order; every other
row is a reject with `stage='relations'` and the relation as its `reason`.
"""

from __future__ import annotations

from functools import lru_cache

import polars as pl
from nltk.corpus import wordnet
from nltk.corpus.reader.wordnet import ADJ, NOUN, VERB

from tasks.core import schemas
from tasks.core.edits import EDIT_TYPES, edited_word
from tasks.core.errors import UserError
from tasks.text.params import RelationsParams

SCHEMA, REJECTS_SCHEMA = schemas.CANDIDATES, schemas.rejects(schemas.CANDIDATES)
NLTK_RESOURCES = ("corpora/wordnet",)  # in the cache keys


def load_models(params: RelationsParams) -> None:
    """Relations needs no model, only NLTK's WordNet at the version params name (else a one-line error)."""
    try:
        version = wordnet.get_version()
    except LookupError:
        raise UserError("WordNet not found under NLTK_DATA: run `python -m nltk.downloader wordnet`") from None
    if version != params.wordnet_version:
        raise UserError(f"WordNet {version} found under NLTK_DATA, relations.wordnet_version is "
                        f"{params.wordnet_version}")


_POS = {"NN": NOUN, "JJ": ADJ, "VB": VERB}  # by tag prefix; ADJ includes satellites (importing loads no WordNet)


@lru_cache(maxsize=65536)
def _synsets(word: str, pos: str = "NN") -> frozenset:
    return frozenset(wordnet.synsets(word.lower(), pos=_POS[pos]))


@lru_cache(maxsize=65536)
def _base(word: str) -> str:
    return wordnet.morphy(word.lower(), wordnet.NOUN) or word.lower()


@lru_cache(maxsize=8)
def _bases(words: tuple[str, ...]) -> frozenset[str]:
    return frozenset(map(_base, words))


@lru_cache(maxsize=65536)
def _ancestors(word: str, pos: str = "NN") -> frozenset:
    """Every hypernym (and instance hypernym) of every sense of `word`, transitively (adjectives have none)."""
    return frozenset(h for s in _synsets(word, pos)
                     for h in s.closure(lambda x: x.hypernyms() + x.instance_hypernyms()))


def relation(original: str, substitute: str, tag: str = "NN") -> str | None:
    """`synonym`, `hyponym` (the substitute is a kind of the original), `hypernym`, or None, for words tagged `tag`."""
    pos = tag[:2]
    if pos not in _POS:
        return None
    if _synsets(original, pos) & _synsets(substitute, pos):
        return "synonym"
    if _synsets(original, pos) & _ancestors(substitute, pos):
        return "hyponym"
    if _synsets(substitute, pos) & _ancestors(original, pos):
        return "hypernym"
    return None


def reason(original: str, substitute: str, params: RelationsParams, tag: str = "NN") -> str | None:
    """The reject reason of one word swap under `params`, or None when it stays."""
    found = relation(original, substitute, tag)
    if found in params.reject:
        return found
    humans = _bases(params.human_words)
    if params.reject_human_pairs and _base(original) in humans and _base(substitute) in humans:
        return "human_words"
    return None


def run(frame: pl.DataFrame, params: RelationsParams, models: None = None):
    """(passing candidates, rejects) for a `candidates` frame."""
    reasons = pl.Series([reason(edited_word(o, edit_type), edited_word(s, edit_type), params, tag)
                         if EDIT_TYPES[edit_type].relations else None for edit_type, tag, o, s
                         in frame.select("edit_type", "tag", "original_word", "substitute").iter_rows()],
                        dtype=pl.String)
    marked = frame.with_columns(reason=reasons, stage=pl.lit("relations"))
    rejects = marked.filter(pl.col("reason").is_not_null()).select(list(REJECTS_SCHEMA))
    return marked.filter(pl.col("reason").is_null()).select(list(SCHEMA)), rejects
