"""`insert`: the empty span before a `sites.noun_tags` token, and before the adjectives right before it (an adjective
goes there), filled by the masked LM with a word tagged `candidates.insert_tags` in place that WordNet knows as an
adjective."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tasks.core.edits import ARTICLES
from tasks.text.params import CandidatesParams, SitesParams
from tasks.text.tagging import Token
from tasks.text.words import WORDS, Site, adjective, is_noun


def sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    """Before each noun, and before the adjectives right before it (`a [] red car`: where size and age go, colour
    and material going next to the noun)."""
    for i, token in enumerate(tokens):
        if is_noun(token, params.noun_tags):
            yield i, token.start, token.start
            first = i
            while first > 0 and tokens[first - 1].tag == "JJ":
                first -= 1
            if first < i:
                yield first, tokens[first].start, tokens[first].start


def check_fill(tag: str, fill: str, site: dict, params: CandidatesParams) -> str | None:
    return None if tag in params.insert_tags and adjective(fill) else "not_an_adjective"


def defects(row: dict, quantity_nouns: tuple[str, ...], numbers: tuple[str, ...]) -> dict[str, bool]:
    """`inserted_non_adjective`: the inserted word is one WordNet knows as no adjective (`a across suitcase`)."""
    inserted = [w for w in WORDS.findall(row["substitute"]) if w.lower() not in ARTICLES]
    return {"inserted_non_adjective": not any(adjective(w) for w in inserted)}
