"""Edit sites: where each edit type in `types` may change C_o, one row per (caption, type, site).

Output `sites(caption_id, image_id, caption, edit_type, position, start, end, original_word, tag, n_tokens)`. The
span `caption[start:end] == original_word` is all an edit of that site may rewrite; `position` is its anchor token's
index in `word_tokenize(caption)` (the token swapped, the token an insert precedes, the first token deleted), `tag`
that token's Penn Treebank tag and `n_tokens` the caption's token count. Per type:
  noun        a token tagged `noun_tags`: the paper's site
  lexical     a token tagged `lexical_tags` (adjectives, verbs), auxiliaries (is, has, do...) excepted
  quantifier  a number (tagged CD) or a / an, through the nouns after it: `a dog`, `two brown dogs`, `a car driving`
              (`tasks.text.quantities` finds the noun it counts)
  insert      the empty span before a `noun_tags` token, and before the adjectives right before it (an adjective
              goes there)
  swap        two nouns, each its noun phrase's only noun, of one tag and number (`plural`), not heading an `of`
              phrase, neither a possessor nor possessed (`'s`); or two attributive adjectives, each right before such
              a noun; no coordinating word, comma or sentence end between them (`a cat and a dog` says the same
              swapped, list items reordered too; two sentences' words play no roles in one clause). The span runs
              from the first word through the second (through the second adjective's noun); `tag` is the first's
              (`tasks.text.swaps` rewrites it)
  delete      an attributive adjective (tagged JJ, before adjectives then the noun it modifies; not a word WordNet knows
              only as a noun, which the tagger misread: `a kitchen start` keeps `kitchen`) with the space after it, or
              a prepositional phrase (`delete_grammar`, not at the start, not headed by `kept_prepositions`) with the
              space before it
Captions without a site of any type go to the rejects with reason `no_site`; captions of more than `max_tokens`
tokens with reason `too_long`, before any site is sought (one such caption would cost as much as hundreds).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from itertools import combinations

import nltk
import polars as pl
from nltk.corpus import wordnet

from tasks.core import schemas
from tasks.text import swaps
from tasks.text.params import SitesParams
from tasks.text.tagging import WORD, Token, chunker, tag_caption

SCHEMA, REJECTS_SCHEMA = schemas.SITES, schemas.SITES_REJECTS
AUXILIARIES = frozenset("is are was were be been being am has have had do does did".split())  # no lexical site
Site = tuple[int, int, int]  # (anchor token index, span start, span end)
NLTK_RESOURCES = ("corpora/wordnet",)  # in the cache keys


def _is_noun(token: Token, params: SitesParams) -> bool:
    return token.tag in params.noun_tags


def noun_sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    yield from ((i, t.start, t.end) for i, t in enumerate(tokens) if _is_noun(t, params))


def lexical_sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    yield from ((i, t.start, t.end) for i, t in enumerate(tokens)
                if t.tag in params.lexical_tags and t.text.lower() not in AUXILIARIES)


def insert_sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    """Before each noun, and before the adjectives right before it (`a [] red car`: where size and age go, colour
    and material going next to the noun)."""
    for i, token in enumerate(tokens):
        if _is_noun(token, params):
            yield i, token.start, token.start
            first = i
            while first > 0 and tokens[first - 1].tag == "JJ":
                first -= 1
            if first < i:
                yield first, tokens[first].start, tokens[first].start


def quantifier_sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    """A counting word, adjectives or participles after it, then nouns: the span ends with the last noun."""
    for i, token in enumerate(tokens):
        if token.tag != "CD" and token.text.lower() not in schemas.ARTICLES:  # a / an count as one
            continue
        j = i + 1
        while j < len(tokens) and tokens[j].tag in ("JJ", "JJR", "JJS", "VBG", "VBN"):
            j += 1
        if j < len(tokens) and _is_noun(tokens[j], params):
            while j + 1 < len(tokens) and _is_noun(tokens[j + 1], params):
                j += 1
            yield i, token.start, tokens[j].end


@lru_cache(maxsize=65536)
def noun_only(word: str) -> bool:
    """WordNet knows `word` as a noun and not as an adjective (a noun the tagger may read as one: kitchen)."""
    return bool(wordnet.synsets(word.lower(), wordnet.NOUN)) and not wordnet.synsets(word.lower(), wordnet.ADJ)


@lru_cache(maxsize=65536)
def adjective(word: str) -> bool:
    """WordNet knows `word` as an adjective (a word tagged as one in place may be none: `a across suitcase`)."""
    return bool(wordnet.synsets(word.lower(), wordnet.ADJ))


def _modifies_a_noun(tokens: Sequence[Token], i: int, params: SitesParams) -> bool:
    """Token i is followed by adjectives, then a noun."""
    j = next((j for j in range(i + 1, len(tokens)) if tokens[j].tag != "JJ"), len(tokens))
    return j < len(tokens) and _is_noun(tokens[j], params)


def _lone_nouns(tokens: Sequence[Token], params: SitesParams) -> list[int]:
    """Indices of the nouns that are their phrase's only noun (no noun just before or after), do not head an `of`
    phrase (`a group of`, `the top of`: quantities and parts, which make no sense swapped) and are neither a possessor
    nor possessed (no `'s` just after or before: `a dog's toy` swapped is `a toy's dog`)."""
    def noun(i: int) -> bool:
        return 0 <= i < len(tokens) and _is_noun(tokens[i], params)

    def tag(i: int) -> str | None:
        return tokens[i].tag if 0 <= i < len(tokens) else None

    return [i for i, t in enumerate(tokens) if noun(i) and swaps.WORD.fullmatch(t.text) and not noun(i - 1)
            and not noun(i + 1) and (i + 1 == len(tokens) or tokens[i + 1].text.lower() != "of")
            and "POS" not in (tag(i - 1), tag(i + 1))]


def plural(token: Token) -> bool:
    """Tagged NNS, or a form WordNet reads only as another noun's inflection (`giraffes`, which the tagger may read
    as NN)."""
    return token.tag == "NNS" or wordnet.morphy(token.text.lower(), wordnet.NOUN) not in (None, token.text.lower())


# Tags between two words that play the same role (a coordination, items of a list) or no role in one clause (a
# sentence, clause or list boundary): a swap across one says the same thing reordered, or joins two sentences' words.
SWAP_BARRIERS = ("CC", ",", ".", ":")


def swap_sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    """Pairs of lone nouns of one tag and number, then pairs of adjectives right before lone nouns, different words
    each, with no `SWAP_BARRIERS` tag between them."""
    nouns = _lone_nouns(tokens, params)
    adjectives = {i - 1: i for i in nouns if i > 0 and tokens[i - 1].tag == "JJ"
                  and swaps.WORD.fullmatch(tokens[i - 1].text) and not noun_only(tokens[i - 1].text)
                  and (i < 2 or tokens[i - 2].tag != "POS")}  # `a man's red car`: no possessive next to it either
    number = {i: (tokens[i].tag, plural(tokens[i])) for i in nouns}
    for ends, same_number in (({i: i for i in nouns}, True), (adjectives, False)):  # unit -> where its span ends
        for a, b in combinations(sorted(ends), 2):
            if (tokens[a].text.lower() != tokens[b].text.lower() and (not same_number or number[a] == number[b])
                    and not any(t.tag in SWAP_BARRIERS for t in tokens[a + 1:b])):
                yield a, tokens[a].start, tokens[ends[b]].end


def delete_sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    for i, token in enumerate(tokens[:-1]):  # an attributive adjective, not inside a coordination
        if (token.tag == "JJ" and WORD.fullmatch(token.text) and not noun_only(token.text)
                and _modifies_a_noun(tokens, i, params) and (i == 0 or tokens[i - 1].tag != "CC")):
            yield i, token.start, tokens[i + 1].start
    tree = chunker(params.delete_grammar).parse([(t.text, t.tag) for t in tokens])
    i = 0
    for node in tree:
        size = len(node) if isinstance(node, nltk.Tree) else 1
        if isinstance(node, nltk.Tree) and i > 0 and tokens[i].text.lower() not in params.kept_prepositions:
            yield i, tokens[i - 1].end, tokens[i + size - 1].end
        i += size


FINDERS = {"noun": noun_sites, "lexical": lexical_sites, "quantifier": quantifier_sites, "insert": insert_sites,
           "delete": delete_sites, "swap": swap_sites}


def run(captions: pl.DataFrame, params: SitesParams, models: None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(sites, rejects) for a `captions(caption_id, image_id, caption)` frame."""
    sites, rejects = [], []
    for row in captions.iter_rows(named=True):
        tokens = tag_caption(row["caption"])
        if len(tokens) > params.max_tokens:
            rejects.append({**row, "reason": "too_long"})
            continue
        found = [{**row, "edit_type": edit_type, "position": i, "start": start, "end": end,
                  "original_word": row["caption"][start:end], "tag": tokens[i].tag, "n_tokens": len(tokens)}
                 for edit_type in params.types for i, start, end in FINDERS[edit_type](tokens, params)]
        sites.extend(found)
        if not found:
            rejects.append({**row, "reason": "no_site"})
    return pl.DataFrame(sites, schema=SCHEMA), pl.DataFrame(rejects, schema=REJECTS_SCHEMA)


def load_models(params: SitesParams) -> None:
    """Sites needs no model: NLTK data is found through `NLTK_DATA`."""
