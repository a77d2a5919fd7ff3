"""Object removal, the caption half: delete from a real caption every noun phrase that names a removed COCO class.

Noun phrases and the classes they name are `mentions`'. What a phrase naming a removed class takes with it:
  - the phrases joined to it by `of` or a possessive ("a slice of pizza", "a man's hand": one unit);
  - what would dangle without it: the conjunctions and commas after it when another noun phrase follows them ("a dog
    and a cat" minus dog: "a cat"); else the run of conjunctions, prepositions and commas before it ("with a
    frisbee", ", and a cat", "next to a dog"), with a participle they complete ("topped with a sandwich"), or else
    the -ing verb it is the object of ("holding an umbrella"), or else the conjunctions and commas after it;
  - the whitespace before the cut (after it, when the cut opens the caption), so no space is doubled or left over.

Invariant: the edited caption is the caption with the deleted spans (`Edit.spans`) cut out, every other character
kept as is (final punctuation included), except its first letter, upper-cased when the caption's first letter was.

Reject reasons (stage `removal_captions`), per caption and for a masks row whose captions all fail (its first's):
  no_caption           the image has no caption
  no_mention           no noun phrase of the caption names a removed class
  subject_removed      a cut takes a subject: it opens the caption and no noun phrase follows ("A dog sitting on a
                       couch" minus dog would read "Sitting on a couch"), or it leaves a clause's verb bare ("in a
                       yard as a dog runs around" minus dog: "in a yard runs around")
  no_remaining_class   after the edit no noun phrase names a class in `remaining`
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import polars as pl

from tasks.core import schemas
from tasks.removal.mentions import ClassWords, chunks, classes_in, mentioned, phrase
from tasks.removal.params import RemovalCaptionsParams
from tasks.text.tagging import Token, tag_caption

SCHEMA, REJECTS_SCHEMA = schemas.REMOVAL_CAPTIONS, schemas.REMOVAL_CAPTIONS_REJECTS
STAGE = "removal_captions"

_CONNECTOR_TAGS = frozenset({"CC", "IN", "TO", ","})
_FOLLOWING_CONNECTOR_TAGS = frozenset({"CC", ","})
_JOINERS = frozenset({"of"})  # and every POS token ('s, ')
_FINITE_VERB_TAGS = frozenset({"VBD", "VBP", "VBZ", "MD"})
_SUBORDINATORS = frozenset({"as", "while", "whilst", "because", "since", "though", "although", "if", "that", "after",
                            "before", "until", "once"})  # IN-tagged words that open a clause


class Edit(NamedTuple):
    edited: str
    deleted: tuple[str, ...]  # the deleted noun phrases (with their `of` / possessive chains), in caption order
    spans: tuple[tuple[int, int], ...]  # the character spans cut out of the caption, sorted and disjoint


def _joined(tokens: Sequence[Token], chunks: list[tuple[int, int]]) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Chains (s, e, member chunks) of chunks joined by `of` or a possessive; a trailing possessive joins its chain."""
    chains: list[tuple[int, int, list[tuple[int, int]]]] = []
    for s, e in chunks:
        if chains and s == chains[-1][1] + 1 and _is_joiner(tokens[s - 1]):
            chains[-1] = (chains[-1][0], e, [*chains[-1][2], (s, e)])
        else:
            chains.append((s, e, [(s, e)]))
    return [(s, e + (e < len(tokens) and tokens[e].tag == "POS"), members) for s, e, members in chains]


def _is_joiner(token: Token) -> bool:
    return token.tag == "POS" or token.text.lower() in _JOINERS


def _is_connector(tokens: Sequence[Token], i: int) -> bool:
    """A token that dangles once the phrase after it is gone: and, with, to, a comma, `next` in `next to`."""
    return (tokens[i].tag in _CONNECTOR_TAGS
            or (tokens[i].text.lower() == "next" and i + 1 < len(tokens) and tokens[i + 1].tag == "TO"))


def _with_connectors(tokens: Sequence[Token], starts: set[int], s: int, e: int) -> tuple[int, int]:
    """The unit [s, e) with what would dangle without it: the conjunctions and commas after it when a noun phrase
    follows them (it was one of a list); else the connectors before it, with a participle they complement ("topped
    with"), or the -ing verb it is the object of ("holding"); else the conjunctions and commas after it."""
    after = _after_connectors(tokens, e)
    if after > e and after in starts:
        return s, after
    a = _before_connectors(tokens, s)
    if a > 0 and tokens[a - 1].tag in ({"VBG"} if a == s else {"VBN", "VBD"}):
        a = _before_connectors(tokens, a - 1)
    return a, after if a == s else e


def _before_connectors(tokens: Sequence[Token], s: int) -> int:
    """The start of the run of connectors ending just before token s."""
    while s > 0 and _is_connector(tokens, s - 1):
        s -= 1
    return s


def _after_connectors(tokens: Sequence[Token], e: int) -> int:
    """The end of the run of conjunctions and commas starting at token e."""
    while e < len(tokens) and tokens[e].tag in _FOLLOWING_CONNECTOR_TAGS:
        e += 1
    return e


def _merged(cuts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Token ranges merged where they overlap or touch, sorted."""
    merged: list[tuple[int, int]] = []
    for a, b in sorted(cuts):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def _spans(caption: str, tokens: Sequence[Token], cuts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Character spans of disjoint token ranges, each with the whitespace before it (after it, opening the caption)."""
    return [(tokens[a - 1].end, tokens[b - 1].end) if a else
            (tokens[0].start, tokens[b].start if b < len(tokens) else len(caption)) for a, b in cuts]


def _cut(caption: str, spans: list[tuple[int, int]]) -> str:
    pieces, cursor = [], 0
    for start, end in spans:
        pieces.append(caption[cursor:start])
        cursor = end
    return "".join(pieces) + caption[cursor:]


def _cuts_subject(tokens: Sequence[Token], starts: set[int], ends: set[int], a: int, b: int) -> bool:
    """The cut [a, b) takes a subject: it opens the caption and the next word starts no noun phrase or is a verb
    ("Sitting on a couch."), or a finite verb follows it and it opens with a subordinating word or follows no noun
    phrase ("A man throws a ball in a yard runs around.", "A cat sitting types on the laptop.")."""
    if b == len(tokens) or not any(c.isalnum() for c in tokens[b].text):
        return False
    if a == 0:
        return b not in starts or tokens[b].tag.startswith("VB")
    return tokens[b].tag in _FINITE_VERB_TAGS and (tokens[a].text.lower() in _SUBORDINATORS or a not in ends)


def _first_letter_as_in(edited: str, caption: str) -> str:
    source = next((c for c in caption if c.isalpha()), "")
    at = next((i for i, c in enumerate(edited) if c.isalpha()), None)
    if at is None or not source.isupper():
        return edited
    return edited[:at] + edited[at].upper() + edited[at + 1:]


def edit(caption: str, removed: list[str], remaining: list[str], grammar: str, class_words: ClassWords) -> Edit | str:
    """The caption without the noun phrases naming a class in `removed`, or the reject reason."""
    tokens = tag_caption(caption)
    removed_set = set(removed)
    np_chunks = chunks(tokens, grammar)
    hits = [(s, e) for s, e, members in _joined(tokens, np_chunks)
            if any(classes_in(phrase(caption, tokens, *m).text, class_words) & removed_set for m in members)]
    if not hits:
        return "no_mention"
    starts, ends = {s for s, _ in np_chunks}, {e for _, e in np_chunks}
    cuts = _merged([_with_connectors(tokens, starts, s, e) for s, e in hits])
    if cuts[0][0] == 0:  # a cut opening the caption takes the conjunctions and commas after it
        cuts = _merged([(0, _after_connectors(tokens, cuts[0][1])), *cuts[1:]])
    if any(_cuts_subject(tokens, starts, ends, a, b) for a, b in cuts):
        return "subject_removed"
    spans = _spans(caption, tokens, cuts)
    edited = _first_letter_as_in(_cut(caption, spans), caption)
    if not mentioned(edited, grammar, class_words) & set(remaining):
        return "no_remaining_class"
    return Edit(edited, tuple(phrase(caption, tokens, s, e).text for s, e in hits), tuple(spans))


def run(masks: pl.DataFrame, captions: pl.DataFrame, class_words: ClassWords,
        params: RemovalCaptionsParams) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(edits, rejects): per masks row, the first `captions_per_image` of its image's captions (by caption id) that
    edit; a row none of whose captions edits is one reject with the first caption's reason (`no_caption`: none)."""
    by_image: dict[str, list[dict]] = {}
    for row in captions.sort("caption_id").iter_rows(named=True):
        by_image.setdefault(row["image_id"], []).append(row)
    edits, rejects = [], []
    for mask in masks.iter_rows(named=True):
        kept, first_failure = 0, None
        for row in by_image.get(mask["image_id"], []):
            result = edit(row["caption"], mask["removed"], mask["remaining"], params.grammar, class_words)
            if result == "no_mention" and not params.require_mention:
                result = Edit(row["caption"], (), ())
            if isinstance(result, str):
                first_failure = first_failure or (row, result)
                continue
            edits.append({**mask, "caption_id": row["caption_id"], "caption": row["caption"],
                          "edited_caption": result.edited, "deleted": list(result.deleted)})
            kept += 1
            if kept == params.captions_per_image:
                break
        if not kept:
            row, reason = first_failure or ({"caption_id": None, "caption": None}, "no_caption")
            rejects.append({"image_id": mask["image_id"], "category": mask["category"], "caption_id": row["caption_id"],
                            "caption": row["caption"], "stage": STAGE, "reason": reason})
    return pl.DataFrame(edits, schema=SCHEMA), pl.DataFrame(rejects, schema=REJECTS_SCHEMA)
