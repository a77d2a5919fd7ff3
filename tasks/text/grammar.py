"""Grammar check of candidate rows: the defects a rule-made or masked-LM edit must not bring into C_c, counted.

  article_disagreement    C_c's edit has an a / an disagreeing with the next word's sound (inflect's rule) that C_o's
                          span did not have: the article before an edited or deleted word must be re-chosen (`in an
                          photo` after deleting `old`, or `big` from `in an big photo`)
  repeated_word           C_c has more words repeated right after themselves, or among one noun's modifiers and the
                          noun, than C_o (`a bicycle bicycle`, `a small green small triangle`, `a square red square`)
  contradictory_adjectives  C_c gives a noun more modifiers that no one thing can be than C_o (`contradictions`:
                          `a small large dog`, `a red blue car`, `a square circle`; not `a large white dog`,
                          `a dark brown horse`, `a black and white cat`, `a square table`)
and each edit type's own (`tasks.core.edits`: its `defects`, found by its `defects` behaviour in
`tasks.text.edits.<type>`, which says what each means).
Each rule reads C_o, the edit and WordNet / inflect only, not how the stages chose the edit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from functools import lru_cache
from itertools import combinations
from typing import cast

import polars as pl
from nltk.corpus import wordnet
from nltk.corpus.reader.wordnet import Synset

from tasks.core.edits import EDIT_TYPES
from tasks.text import edits
from tasks.text.quantities import disagreeing
from tasks.text.tagging import Token, tag_caption
from tasks.text.words import WORDS

DEFECTS = ("article_disagreement", "repeated_word", "contradictory_adjectives",
           *(d for t in EDIT_TYPES.values() for d in t.defects))
_COORDINATORS = frozenset(("and", "or", "nor", "&"))  # any tag: the tagger reads an upper-case AND as NNP


def _adjectival(token: Token) -> bool:
    """Tagged an adjective, or an adverb or verb whose adjective reading is a colour (the tagger reads a colour next to
    a repeated size as either: `three small blue small circles` RB, `two small red small triangles` VBD)."""
    return token.tag.startswith("JJ") or token.tag[:2] in ("RB", "VB") and _colour(token.text, True) is not None


def _modifiers(text: str) -> Iterator[tuple[list[Token], Token]]:
    """Each noun phrase's (modifiers, noun) in `text`: the last noun of a run of adjectives and nouns and the words
    before it in the run, which a coordinator or comma ends (`a black and white cat`: black, then white cat)."""
    run: list[Token] = []
    for token in (*tag_caption(text), None):
        phrase = token is not None and (token.tag.startswith("NN") or _adjectival(token)) \
            and token.text.lower() not in _COORDINATORS
        if phrase:
            run.append(cast(Token, token))  # a phrase's token is one
            continue
        last_noun = max((i for i, t in enumerate(run) if t.tag.startswith("NN")), default=0)
        if last_noun:
            yield run[:last_noun], run[last_noun]
        run = []


def _base(word: str) -> str:
    """`word` lowercased, a plural WordNet knows made singular (squares -> square)."""
    return wordnet.morphy(word.lower(), wordnet.NOUN) or word.lower()


def repeats(text: str) -> int:
    """How many words of `text` repeat the word right before them, or another word among one noun's modifiers and
    the noun, plural or not (`a small green small triangle`, `two square squares`), case aside; proper nouns aside
    (an upper-case caption is tagged NNP throughout: `A PICTURE OF A MAN`)."""
    words = [w.lower() for w in WORDS.findall(text)]
    apart = sum(_base(a.text) == _base(b.text) and a.tag != "NNP" for modifiers, noun in _modifiers(text)
                for (i, a), (j, b) in combinations(enumerate((*modifiers, noun)), 2)
                if j > i + 1 or a.text.lower() != b.text.lower())  # next to each other: counted below if the same
    return sum(a == b for a, b in zip(words, words[1:])) + apart


def _head(synset: Synset) -> Synset:
    """An adjective cluster's head: the synset itself, or the head a satellite is similar to (tiny -> small)."""
    return next(iter(synset.similar_tos()), synset) if synset.pos() == "s" else synset


def _is_colour(synset: Synset) -> bool:
    return wordnet.synset("color.n.01") in synset.closure(lambda s: s.hypernyms())


@lru_cache(maxsize=65536)
def _colour(word: str, adjective: bool) -> Synset | None:
    """The colour `word` names in its most frequent WordNet sense of its tagged part of speech, else None. An
    adjective: a sense in a hue cluster (chromatic: red, olive; achromatic: grey) or a lightness pole whose word
    names a colour noun (white, black; not light, dark, pale, which qualify a colour: `a dark brown horse`). A noun:
    a hyponym of color.n.01 (`a red blue car`, blue tagged NN; not jet, a plane first, or orange, a fruit first)."""
    senses = wordnet.synsets(word.lower(), wordnet.ADJ if adjective else wordnet.NOUN)
    if not senses:
        return None
    if not adjective:
        return senses[0] if _is_colour(senses[0]) else None
    head = _head(senses[0])
    kinds = head.attributes()
    if wordnet.synset("hue.n.01") in kinds or (wordnet.synset("value.n.04") in kinds and any(
            _is_colour(s) for s in wordnet.synsets(head.lemmas()[0].name(), wordnet.NOUN))):
        return senses[0]
    return None


@lru_cache(maxsize=65536)
def _pole(word: str) -> Synset | None:
    """The head of the cluster of `word`'s most frequent adjective sense (big, huge -> large.a.01), or None."""
    senses = wordnet.synsets(word.lower(), wordnet.ADJ)
    return _head(senses[0]) if senses else None


def _contradict(a: Token, b: Token) -> bool:
    """Two different colours, or two adjectives of antonymous clusters (large / small, old / young, wet / dry)."""
    adjectives = _adjectival(a), _adjectival(b)
    colours = _colour(a.text, adjectives[0]), _colour(b.text, adjectives[1])
    if all(colours):
        return colours[0] != colours[1] and a.text.lower() != b.text.lower()
    if not all(adjectives) or (pole := _pole(a.text)) is None:
        return False
    return _pole(b.text) in {x.synset() for lemma in pole.lemmas() for x in lemma.antonyms()}


def _is_figure(synset: Synset) -> bool:
    return wordnet.synset("plane_figure.n.01") in synset.closure(lambda s: s.hypernyms())


@lru_cache(maxsize=65536)
def _figure(word: str) -> Synset | None:
    """The plane figure `word` names, whatever its tag (`a square circle`: square read as a noun or an adjective),
    else None: its most frequent noun sense (circle, square), or a figure its most frequent adjective sense derives
    from (round -> circle, triangular -> triangle)."""
    senses = wordnet.synsets(word.lower(), wordnet.NOUN)[:1] + [
        d.synset() for s in wordnet.synsets(word.lower(), wordnet.ADJ)[:1] for lemma in s.lemmas()
        for d in lemma.derivationally_related_forms()]
    return next((s for s in senses if _is_figure(s)), None)


def _misshapes(modifier: Token, noun: Token) -> bool:
    """`modifier` names a plane figure that the figure `noun` names is not, nor one of its kinds (`a square circle`;
    not `a rectangular square`, `a square table`)."""
    said, named = _figure(modifier.text), _figure(noun.text)
    if said is None or named is None:
        return False
    return said != named and said not in named.closure(lambda s: s.hypernyms()) \
        and named not in said.closure(lambda s: s.hypernyms())


def contradictions(text: str) -> int:
    """What no one thing can be, counted over each noun phrase (`_modifiers`): pairs of its modifiers of one kind
    that exclude each other (`_contradict`: two colours, two opposite sizes) and modifiers naming a figure its noun
    is not (`_misshapes`). Kinds are WordNet's, by each word's most frequent sense (sizes by their clusters'
    antonymy, not by word: `a tiny little dog` is one size). 5 of COCO val2017's 25,014 captions have one
    (`olive green`, `a yellow red umbrella`): the defect is a count C_o did not have."""
    return sum(sum(_contradict(a, b) for a, b in combinations(modifiers, 2)) + sum(_misshapes(m, noun)
                                                                                   for m in modifiers)
               for modifiers, noun in _modifiers(text))


def new_disagreements(row: dict) -> int:
    """How many a / an of C_c's edit (`candidate[start:start + len(substitute)]`, the article before it and the word
    after it included) disagree with their next word, beyond the same disagreeing pairs in C_o's span."""
    start = row["start"]
    made = disagreeing(row["candidate"], start, start + len(row["substitute"]))
    return (Counter(made) - Counter(disagreeing(row["caption"], start, row["end"]))).total()


def defects(row: dict, quantity_nouns: tuple[str, ...], numbers: tuple[str, ...]) -> list[str]:
    """The `DEFECTS` of one candidate row (a `candidates` schema dict)."""
    found = {"article_disagreement": new_disagreements(row) > 0,
             "repeated_word": repeats(row["candidate"]) > repeats(row["caption"]),
             "contradictory_adjectives": contradictions(row["candidate"]) > contradictions(row["caption"])}
    if EDIT_TYPES[row["edit_type"]].defects:
        found |= edits.function(row["edit_type"], "defects")(row, quantity_nouns, numbers)
    return [defect for defect in DEFECTS if found.get(defect)]


def count(candidates: pl.DataFrame, quantity_nouns: tuple[str, ...], numbers: tuple[str, ...]) -> dict[str, int]:
    """Rows with each of the `DEFECTS` among `candidates`."""
    totals = dict.fromkeys(DEFECTS, 0)
    for row in candidates.iter_rows(named=True):
        for defect in defects(row, quantity_nouns, numbers):
            totals[defect] += 1
    return totals
