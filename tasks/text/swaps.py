"""Swap edits: two words of one kind exchanged within C_o (SugarCrepe's swap-obj and swap-att, Winoground's word
order, Polyjuice's `shuffle`).

  noun       the nouns of two noun phrases, each its phrase's only noun, tag for tag: `a dog on a couch` -> `a couch
             on a dog` (the site's span runs from the first noun to the second)
  adjective  two attributive adjectives, each right before its phrase's only noun: `a red car next to a white house`
             -> `a white car next to a red house` (the span runs on through the second adjective's noun, so it reads
             as a phrase: what the both-subjects check and the judge ask about)
`exchange` rewrites a site's span: the two words change places, each keeping its own case (an acronym stays upper
case, a common noun lower case) except for a sentence's initial capital, which stays with its place, and the article
before each agrees with the word it now precedes (`quantities.agree`); every other character is kept. The two-span
minimal edit (`exchanged`): C_c's words are C_o's with exactly two words, different and of one kind, swapped by that
case rule, and nothing else changed but a / an.
"""

from __future__ import annotations

import re

from tasks.core.edits import ARTICLES
from tasks.text.quantities import agree

WORD = re.compile(r"[^\W_]+(?:-[^\W_]+)*")  # a unit swapped (its inner hyphens kept); `woman's` holds two


def opens_sentence(text: str, at: int) -> bool:
    """The word at character `at` is the first of a sentence (of `text`, or after `.`, `!` or `?`)."""
    before = text[:at].rstrip()
    return not before or before[-1] in ".!?"


def _cased(word: str, was_opening: bool, occupant: str, opens: bool) -> str:
    """`word` moved from a place that opened a sentence or not (`was_opening`) to `occupant`'s place, which opens one
    or not (`opens`): an all-capital word (TV, SUV) as it is; otherwise its own case, except that a sentence's initial
    capital stays with its place (dropped where the word leaves one, taken from `occupant` where it arrives)."""
    if len(word) > 1 and word.isupper():
        return word
    if was_opening:
        word = word[0].lower() + word[1:]
    return word[0].upper() + word[1:] if opens and occupant[0].isupper() else word


def exchange(caption: str, start: int, end: int, adjective: bool) -> str:
    """The rewrite of a swap site's span `caption[start:end]`: its first word exchanged with its last (a noun swap) or
    with the word before its last (an adjective swap, whose span ends with the second adjective's noun), the article
    before the second place agreeing; the article before the first is `candidates.edit`'s."""
    words = list(WORD.finditer(caption, start, end))
    first, second = words[0], words[-2 if adjective else -1]
    a, b = first.group(), second.group()
    opening = opens_sentence(caption, first.start()), opens_sentence(caption, second.start())
    second_start, moved = agree(caption, second.start(), second.end(), _cased(a, opening[0], b, opening[1]))
    return _cased(b, opening[1], a, opening[0]) + caption[first.end():second_start] + moved + caption[second.end():end]


def exchanged(caption: str, counterfactual: str) -> bool:
    """The two-span minimal edit: both captions have the same words but at two places, which hold two different
    words swapped (each cased by `exchange`'s rule), and at a / an articles (the word after them changed)."""
    o, c = list(WORD.finditer(caption)), list(WORD.finditer(counterfactual))
    if len(o) != len(c) or caption == counterfactual:
        return False
    differ = [i for i, (a, b) in enumerate(zip(o, c)) if a.group() != b.group()
              and not {a.group().lower(), b.group().lower()} <= set(ARTICLES)]
    if len(differ) != 2:
        return False

    def moved(i: int, j: int) -> bool:  # C_o's word i is C_c's word j, cased for its new place
        return c[j].group() == _cased(o[i].group(), opens_sentence(caption, o[i].start()), o[j].group(),
                                      opens_sentence(counterfactual, c[j].start()))

    i, j = differ
    return (moved(i, j) and moved(j, i) and o[i].group().lower() != o[j].group().lower()
            and WORD.sub("", caption) == WORD.sub("", counterfactual))
