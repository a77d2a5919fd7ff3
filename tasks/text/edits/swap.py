"""`swap`: two nouns, each its noun phrase's only noun, of one tag and number (`words.plural`), not heading an `of`
phrase, neither a possessor (`'s`) nor possessed (`words.possessed`: `a man's car`, `its red ball`, `it's cat`); or two
attributive adjectives, each right before such a noun; no coordinating word, comma, sentence end, pronoun or
possessive between them (`a cat and a dog` says the same swapped, list items reordered too; two sentences' words play
no roles in one clause; `a cat on a bed as it is looking at a dog`, `a dog looking at its toy on a bed`: what the
pronoun or possessive refers to would change). The span runs from the first word through the second (through
the second adjective's noun); `tag` is the first's. Its rewrite exchanges the two (`tasks.text.swaps.exchange`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import combinations

from tasks.core.edits import ARTICLES
from tasks.text import swaps
from tasks.text.params import CandidatesParams, SitesParams
from tasks.text.tagging import Token, tag_caption
from tasks.text.words import POSSESSIVE_TAGS, Site, is_noun, noun_only, plural, possessed, possessive

NLTK_RESOURCES = ("corpora/wordnet",)  # in the cache keys
# Tags between two words that play the same role (a coordination, items of a list), no role in one clause (a
# sentence, clause or list boundary), or roles a word between them ties to one of them (a pronoun: `as it is`, `it's`;
# a possessive): a swap across one says the same thing reordered, joins two sentences' words, or re-points the word.
SWAP_BARRIERS = ("CC", ",", ".", ":", "PRP", *POSSESSIVE_TAGS)


def _lone_nouns(tokens: Sequence[Token], noun_tags: tuple[str, ...]) -> list[int]:
    """Indices of the nouns that are their phrase's only noun (no noun just before or after), do not head an `of`
    phrase (`a group of`, `the top of`: quantities and parts, which make no sense swapped) and are neither a possessor
    (no `'s` just after: `a dog's toy` swapped is `a toy's dog`) nor possessed (`words.possessed`: the possessive would
    own the other word)."""
    def noun(i: int) -> bool:
        return 0 <= i < len(tokens) and is_noun(tokens[i], noun_tags)

    def tag(i: int) -> str | None:
        return tokens[i].tag if 0 <= i < len(tokens) else None

    return [i for i, t in enumerate(tokens) if noun(i) and swaps.WORD.fullmatch(t.text) and not noun(i - 1)
            and not noun(i + 1) and (i + 1 == len(tokens) or tokens[i + 1].text.lower() != "of")
            and tag(i + 1) != "POS" and not possessed(tokens, i)]


def sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    """Pairs of lone nouns of one tag and number, then pairs of adjectives right before lone nouns, different words
    each, with no `SWAP_BARRIERS` tag between them."""
    nouns = _lone_nouns(tokens, params.noun_tags)
    adjectives = {i - 1: i for i in nouns if i > 0 and tokens[i - 1].tag == "JJ"
                  and swaps.WORD.fullmatch(tokens[i - 1].text) and not noun_only(tokens[i - 1].text)}
    number = {i: (tokens[i].tag, plural(tokens[i])) for i in nouns}
    for ends, same_number in (({i: i for i in nouns}, True), (adjectives, False)):  # unit -> where its span ends
        for a, b in combinations(sorted(ends), 2):
            if (tokens[a].text.lower() != tokens[b].text.lower() and (not same_number or number[a] == number[b])
                    and not any(t.tag in SWAP_BARRIERS for t in tokens[a + 1:b])):
                yield a, tokens[a].start, tokens[ends[b]].end


def rewrite(site: dict, params: CandidatesParams) -> tuple[list[str], str | None]:
    return [swaps.exchange(site["caption"], site["start"], site["end"], adjective=site["tag"] == "JJ")], None


def defects(row: dict, quantity_nouns: tuple[str, ...], numbers: tuple[str, ...]) -> dict[str, bool]:
    """`swap_not_exchanged`: C_c is not C_o with two different words exchanged (`swaps.exchanged`); on the two words
    of C_o that C_c exchanged (its first and last differing words): `swap_list_reorder`, a comma or a coordination
    between them; `swap_possessive`, one possessed (`words.possessed`) or followed by `'s` (right after it or its
    noun), or a possessive between them; `swap_across_pronoun`, a pronoun between them (`it`, `it's`, `it is`);
    `swap_across_sentences`, they are in different sentences."""
    caption = row["caption"]
    found = {"swap_not_exchanged": not swaps.exchanged(caption, row["candidate"])}
    o, c = list(swaps.WORD.finditer(caption)), swaps.WORD.findall(row["candidate"])
    differ = [i for i, (a, b) in enumerate(zip(o, c)) if a.group().lower() != b.lower()
              and not {a.group().lower(), b.lower()} <= set(ARTICLES)]
    if len(o) != len(c) or len(differ) < 2:
        return found
    first, second = o[differ[0]], o[differ[-1]]
    tokens = tag_caption(caption)
    at = [i for i, t in enumerate(tokens) if t.start in (first.start(), second.start())]
    inside = range(at[0] + 1, at[-1]) if len(at) == 2 else range(0)
    between = [tokens[k] for k in inside]
    possessor = any(tokens[j].tag == "POS" for i in at for j in (i + 1, i + 2) if j < len(tokens))
    return found | {"swap_list_reorder": any(t.tag in (",", "CC") for t in between),
                    "swap_possessive": possessor or any(possessed(tokens, i) for i in at)
                    or any(possessive(tokens, k) for k in inside),
                    "swap_across_pronoun": any(t.tag == "PRP" for t in between),
                    "swap_across_sentences": swaps.opens_sentence(caption, second.start())
                    or any(t.tag == "." for t in between)}
