"""What WordNet and the tagger say of single words, as every edit type's behaviours read it (`tasks.text.edits`)."""

from __future__ import annotations

import re
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


def plural(token: Token) -> bool:
    """Tagged NNS, or a form WordNet reads only as another noun's inflection (`giraffes`, which the tagger may read
    as NN)."""
    return token.tag == "NNS" or wordnet.morphy(token.text.lower(), wordnet.NOUN) not in (None, token.text.lower())
