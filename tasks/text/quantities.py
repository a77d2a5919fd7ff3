"""Counting edits: `a dog` -> `two dogs`, `two brown dogs` -> `three brown dogs` / `a brown dog`.

A counted phrase is the tokens from a counting word to its head noun (the last token). `recounts` moves the count one
step down and one up in `numbers` (a / an count as the first) and makes the head noun agree (inflect's plural /
singular); the words between are kept byte for byte. A count of one is written a / an, agreeing with the next word.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import inflect

from tasks.text.tagging import Token

ARTICLES = ("a", "an")


@cache
def _engine() -> inflect.engine:
    return inflect.engine()


def count(word: str, numbers: tuple[str, ...]) -> int | None:
    """1 for a / an, else the 1-based place of `word` in `numbers`; None when it is neither."""
    word = word.lower()
    if word in ARTICLES:
        return 1
    return numbers.index(word) + 1 if word in numbers else None


def inflect_noun(noun: str, plural: bool) -> str:
    """`noun` as plural or singular (unchanged when already so)."""
    engine = _engine()
    singular = engine.singular_noun(noun)  # False when `noun` is not a plural
    if plural:
        return noun if singular else engine.plural_noun(noun)
    return singular or noun


def recounts(caption: str, tokens: Sequence[Token], numbers: tuple[str, ...]) -> list[str] | None:
    """The span `caption[tokens[0].start:tokens[-1].end]` with its count one step down and one up (those on the
    list), or None when its counting word is not one of `numbers` (nor a / an)."""
    current = count(tokens[0].text, numbers)
    if current is None:
        return None
    return [_recount(caption, tokens, target, numbers) for target in (current - 1, current + 1)
            if 1 <= target <= len(numbers)]


def _recount(caption: str, tokens: Sequence[Token], target: int, numbers: tuple[str, ...]) -> str:
    first, head = tokens[0], tokens[-1]
    noun = inflect_noun(head.text, plural=target > 1)
    middle = caption[first.end:head.start]
    word = numbers[target - 1]
    if target == 1:
        word = _engine().a((middle.strip() or noun).split()[0]).split()[0]  # `a` or `an` for what follows
    if first.text[0].isupper():
        word = word[0].upper() + word[1:]
    return word + middle + noun
