"""`noun`, the paper's edit: a token tagged `sites.noun_tags`, swapped for a masked-LM fill tagged
`candidates.keep_tags`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tasks.text.params import CandidatesParams, SitesParams
from tasks.text.tagging import Token
from tasks.text.words import Site, is_noun


def sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    yield from ((i, t.start, t.end) for i, t in enumerate(tokens) if is_noun(t, params.noun_tags))


def check_fill(tag: str, fill: str, site: dict, params: CandidatesParams) -> str | None:
    return None if tag in params.keep_tags else "not_a_noun"
