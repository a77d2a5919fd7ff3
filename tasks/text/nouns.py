"""Noun tagging: every NLTK token tagged NN/NNS is a substitution site, with its character span in the caption.

Output `nouns(caption_id, image_id, caption, position, start, end, original_word, tag, n_tokens)`, one row per site:
`caption[start:end] == original_word` and `position` is the token's index in `word_tokenize(caption)`.
Captions without a site go to the rejects with reason `no_noun`.
"""

from __future__ import annotations

from typing import NamedTuple

import nltk
import polars as pl

from tasks.core import schemas
from tasks.core.params import NounsParams

SCHEMA, REJECTS_SCHEMA = schemas.NOUNS, schemas.NOUNS_REJECTS
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


def tag_caption(caption: str) -> list[Token]:
    tokens = tokenize(caption)
    return [Token(t, tag, s, e) for t, tag, (s, e) in zip(tokens, tag_tokens(tokens), _spans(caption, tokens))]


def run(captions: pl.DataFrame, params: NounsParams, models: None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(sites, rejects) for a `captions(caption_id, image_id, caption)` frame."""
    sites, rejects = [], []
    for row in captions.iter_rows(named=True):
        tokens = tag_caption(row["caption"])
        found = [
            {**row, "position": i, "start": t.start, "end": t.end, "original_word": t.text, "tag": t.tag,
             "n_tokens": len(tokens)}
            for i, t in enumerate(tokens) if t.tag in params.tags
        ]
        sites.extend(found)
        if not found:
            rejects.append({**row, "reason": "no_noun"})
    return pl.DataFrame(sites, schema=SCHEMA), pl.DataFrame(rejects, schema=REJECTS_SCHEMA)


def load_models(params: NounsParams) -> None:
    """Nouns needs no model: NLTK data is found through `NLTK_DATA`."""
