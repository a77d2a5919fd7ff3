"""`delete`: an attributive adjective (tagged JJ, before adjectives then the noun it modifies; not a word WordNet knows
only as a noun, which the tagger misread: `a kitchen start` keeps `kitchen`) with the space after it, or a
prepositional phrase (`sites.delete_grammar`, not at the start, not headed by `kept_prepositions`) with the space
before it; the span removed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import nltk
from nltk.corpus import wordnet

from tasks.core.edits import ARTICLES
from tasks.text.params import CandidatesParams, SitesParams
from tasks.text.tagging import WORD, Token, chunker, tag_caption
from tasks.text.words import WORDS, Site, is_noun, noun_only

NLTK_RESOURCES = ("corpora/wordnet",)  # in the cache keys


def _modifies_a_noun(tokens: Sequence[Token], i: int, noun_tags: tuple[str, ...]) -> bool:
    """Token i is followed by adjectives, then a noun."""
    j = next((j for j in range(i + 1, len(tokens)) if tokens[j].tag != "JJ"), len(tokens))
    return j < len(tokens) and is_noun(tokens[j], noun_tags)


def sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    for i, token in enumerate(tokens[:-1]):  # an attributive adjective, not inside a coordination
        if (token.tag == "JJ" and WORD.fullmatch(token.text) and not noun_only(token.text)
                and _modifies_a_noun(tokens, i, params.noun_tags) and (i == 0 or tokens[i - 1].tag != "CC")):
            yield i, token.start, tokens[i + 1].start
    tree = chunker(params.delete_grammar).parse([(t.text, t.tag) for t in tokens])
    i = 0
    for node in tree:
        size = len(node) if isinstance(node, nltk.Tree) else 1
        if isinstance(node, nltk.Tree) and i > 0 and tokens[i].text.lower() not in params.kept_prepositions:
            yield i, tokens[i - 1].end, tokens[i + size - 1].end
        i += size


def rewrite(site: dict, params: CandidatesParams) -> tuple[list[str], str | None]:
    return [""], None


def _surely_a_noun(caption: str, at: int) -> bool:
    """The token at character `at` is tagged a noun and WordNet knows it as a noun, never as an adjective or verb."""
    return any(t.tag.startswith("NN") and noun_only(t.text) and not wordnet.synsets(t.text.lower(), wordnet.VERB)
               for t in tag_caption(caption) if t.start == at)


def defects(row: dict, quantity_nouns: tuple[str, ...], numbers: tuple[str, ...]) -> dict[str, bool]:
    """`head_noun_deleted`: a word WordNet knows as a noun, not an adjective (one the tagger read as an adjective),
    deleted before a word that may be no noun (`in a kitchen start` -> `in a start`)."""
    deleted = [w for w in WORDS.findall(row["original_word"]) if w.lower() not in ARTICLES]  # an article agreeing
    return {"head_noun_deleted": len(deleted) == 1 and noun_only(deleted[0])
            and not _surely_a_noun(row["caption"], row["end"])}
