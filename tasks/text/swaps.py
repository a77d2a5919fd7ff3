"""Swap edits: two words of one kind exchanged within C_o (SugarCrepe's swap-obj and swap-att, Winoground's word
order, Polyjuice's `shuffle`).

  noun       the nouns of two noun phrases, each its phrase's only noun, tag for tag: `a dog on a couch` -> `a couch
             on a dog` (the site's span runs from the first noun to the second)
  adjective  two attributive adjectives, each right before its phrase's only noun: `a red car next to a white house`
             -> `a white car next to a red house` (the span runs on through the second adjective's noun, so it reads
             as a phrase: what the both-subjects check and the judge ask about)
`exchange` rewrites a site's span: the two words change places, each taking the other's initial case, and the article
before each agrees with the word it now precedes (`quantities.agree`); every other character is kept. The two-span
minimal edit (`exchanged`): C_c's words are C_o's with exactly two words, different and of one kind, swapped, and
nothing else changed but a / an.
"""

from __future__ import annotations

import re

from tasks.core.schemas import ARTICLES
from tasks.text.quantities import agree

WORD = re.compile(r"[^\W_]+(?:-[^\W_]+)*")  # a unit swapped (its inner hyphens kept); `woman's` holds two


def _cased(word: str, like: str) -> str:
    """`word` with the initial case of `like` (an all-capital word, SUV, kept)."""
    if len(word) > 1 and word.isupper():
        return word
    return word[0].upper() + word[1:] if like[0].isupper() else word[0].lower() + word[1:]


def exchange(caption: str, start: int, end: int, adjective: bool) -> str:
    """The rewrite of a swap site's span `caption[start:end]`: its first word exchanged with its last (a noun swap) or
    with the word before its last (an adjective swap, whose span ends with the second adjective's noun), the article
    before the second place agreeing; the article before the first is `candidates.edit`'s."""
    words = list(WORD.finditer(caption, start, end))
    first, second = words[0], words[-2 if adjective else -1]
    second_start, moved = agree(caption, second.start(), second.end(), _cased(first.group(), second.group()))
    return (_cased(second.group(), first.group()) + caption[first.end():second_start] + moved
            + caption[second.end():end])


def exchanged(caption: str, counterfactual: str) -> bool:
    """The two-span minimal edit: both captions have the same words but at two places, which hold two different
    words swapped (initial case aside), and at a / an articles (the word after them changed)."""
    o, c = WORD.findall(caption), WORD.findall(counterfactual)
    if len(o) != len(c) or caption == counterfactual:
        return False
    differ = [i for i, (a, b) in enumerate(zip(o, c)) if a != b and not {a.lower(), b.lower()} <= set(ARTICLES)]
    if len(differ) != 2:
        return False
    i, j = differ
    return (o[i].lower() == c[j].lower() and o[j].lower() == c[i].lower() and o[i].lower() != o[j].lower()
            and WORD.sub("", caption) == WORD.sub("", counterfactual))
