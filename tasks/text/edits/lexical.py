"""`lexical`: a token tagged `sites.lexical_tags` (adjectives, verbs), auxiliaries (is, has, do...) excepted, swapped
for a masked-LM fill tagged exactly as the word it replaces."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tasks.text.params import CandidatesParams, SitesParams
from tasks.text.tagging import Token
from tasks.text.words import Site

AUXILIARIES = frozenset("is are was were be been being am has have had do does did".split())  # no lexical site


def sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    yield from ((i, t.start, t.end) for i, t in enumerate(tokens)
                if t.tag in params.lexical_tags and t.text.lower() not in AUXILIARIES)


def check_fill(tag: str, fill: str, site: dict, params: CandidatesParams) -> str | None:
    return None if tag == site["tag"] else "tag_changed"
