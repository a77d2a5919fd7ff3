"""What WordNet and the tagger say of single words, as every edit type's behaviours read it (`tasks.text.edits`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from nltk.corpus import wordnet

from tasks.text.tagging import Token

NLTK_RESOURCES = ("corpora/wordnet",)  # in the cache keys
Site = tuple[int, int, int]  # (anchor token index, span start, span end)
WORDS = re.compile(r"[^\W_][\w'-]*")  # the words of a span or caption, as the grammar rules count them


def is_noun(token: Token, noun_tags: tuple[str, ...]) -> bool:
    return token.tag in noun_tags


@lru_cache(maxsize=65536)
def noun_only(word: str) -> bool:
    """WordNet knows `word` as a noun and not as an adjective (a noun the tagger may read as one: kitchen)."""
    return bool(wordnet.synsets(word.lower(), wordnet.NOUN)) and not wordnet.synsets(word.lower(), wordnet.ADJ)


@lru_cache(maxsize=65536)
def adjective(word: str) -> bool:
    """WordNet knows `word` as an adjective (a word tagged as one in place may be none: `a across suitcase`)."""
    return bool(wordnet.synsets(word.lower(), wordnet.ADJ))


POSSESSIVE_TAGS = ("POS", "PRP$", "WP$")  # `'s`; its, his, their; whose


def possessive(tokens: Sequence[Token], k: int) -> bool:
    """Token k marks possession: tagged `POSSESSIVE_TAGS`, or `'s` / `s` right after `it` (`looking at it's cat`: its
    misspelt, which the tagger reads as it is)."""
    return tokens[k].tag in POSSESSIVE_TAGS or (
        k > 0 and tokens[k].text.lower() in ("'s", "’s", "s") and tokens[k - 1].text.lower() == "it")


def possessed(tokens: Sequence[Token], i: int) -> bool:
    """The word at i is in a possessed phrase: a possessive right before it or before the adjectives right before it
    (`a man's car`, `its red ball`, `it's cat`)."""
    j = i - 1
    while j >= 0 and tokens[j].tag == "JJ" and not possessive(tokens, j):
        j -= 1
    return j >= 0 and possessive(tokens, j)


def plural(token: Token) -> bool:
    """Tagged NNS, or a form WordNet reads only as another noun's inflection (`giraffes`, which the tagger may read
    as NN)."""
    return token.tag == "NNS" or wordnet.morphy(token.text.lower(), wordnet.NOUN) not in (None, token.text.lower())
