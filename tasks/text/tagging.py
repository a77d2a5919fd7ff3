"""POS tagging of a caption: NLTK `word_tokenize` tokens, their Penn Treebank tags (`pos_tag`) and character spans,
so `caption[token.start:token.end]` is the token's own text (Penn Treebank quotes map back to the source's).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

import nltk

from tasks.core.errors import UserError

NLTK_RESOURCES = ("tokenizers/punkt_tab/english", "taggers/averaged_perceptron_tagger_eng")  # in the cache keys
WORD = re.compile(r"[^\W\d_]+(?:[-'][^\W\d_]+)*")  # letters, with inner hyphens and apostrophes
# word_tokenize rewrites double quotes as Penn Treebank quotes (and an opening '' as ``); the source has '"' or ''.
_QUOTE_TOKENS = {"``": ('"', "``", "''"), "''": ('"', "''")}


class Token(NamedTuple):
    text: str
    tag: str
    start: int
    end: int


def tokenize(caption: str) -> list[str]:
    return nltk.word_tokenize(caption)


def tag_tokens(tokens: list[str]) -> list[str]:
    return [tag for _, tag in nltk.pos_tag(tokens)]


def _spans(caption: str, tokens: list[str]) -> list[tuple[int, int]]:
    """Character span of each token, found left to right in the untouched caption."""
    spans, cursor = [], 0
    for token in tokens:
        forms = _QUOTE_TOKENS.get(token, (token,))
        hits = [(caption.find(form, cursor), form) for form in forms]
        start, form = min((hit for hit in hits if hit[0] >= 0), default=(-1, token))
        if start < 0:
            raise ValueError(f"token {token!r} not found in {caption!r} after offset {cursor}")
        spans.append((start, start + len(form)))
        cursor = start + len(form)
    return spans


@lru_cache(maxsize=4096)
def tag_caption(caption: str) -> tuple[Token, ...]:
    """Cached: a caption's sites, rewrites and saliency all read its tags, and tagging is the costly part."""
    tokens = tokenize(caption)
    return tuple(Token(t, tag, s, e) for t, tag, (s, e) in zip(tokens, tag_tokens(tokens), _spans(caption, tokens)))


@lru_cache(maxsize=8)
def chunker(grammar: str) -> nltk.RegexpParser:
    """NLTK's chunk parser of a params grammar; one that NLTK cannot read is a one-line UserError quoting it."""
    try:
        return nltk.RegexpParser(grammar)
    except ValueError as err:
        raise UserError(f"chunk grammar {grammar!r}: {err} (NLTK RegexpParser syntax)") from None
