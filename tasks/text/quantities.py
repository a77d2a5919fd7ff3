"""Counting edits and the articles edits leave: `a dog` -> `two dogs`, `two brown dogs` -> `three brown dogs` / `a
brown dog`, `an old hat` -> `a hat`.

A counted phrase (a quantifier site) is the tokens from a counting word through the nouns after it. Its head, the noun
counted, is the last noun, unless the phrase ends in -ing words after a noun that WordNet knows as no thing (in a
tagged sense): participles (`a car driving` counts `car` and keeps `driving`; `a stone building` counts `building`).
`recounts` moves the count one step down and one up in `numbers` (a / an count as the first) and makes the head agree
(inflect's plural / singular); every other character is kept. It makes none, with a reason, where a count would come
out wrong: a head that is a quantity, not a thing counted (`a lot of`, `a bunch of`), or no clear head (`a railroad
crossing`: a thing only in senses no text was tagged with). A count of one is written `a`; `agree` then makes every
article an edit leaves before a new word follow its sound (inflect's rule: an hour, a unicorn, a one-way street; an
SUV).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache, lru_cache
from typing import TYPE_CHECKING, cast

from nltk.corpus import wordnet

from tasks.core.edits import ARTICLES
from tasks.text.tagging import Token, tag_caption

if TYPE_CHECKING:
    import inflect

NLTK_RESOURCES = ("corpora/wordnet",)  # in the cache keys
DETERMINERS = ("DT", "PRP$", "POS", "WP$")  # tags of the words a count of one (`a`) cannot follow
AN_INITIALISMS = ("SUV",)  # said letter by letter, which inflect's rule reads as a word
THINGS = frozenset(f"noun.{kind}" for kind in "artifact location object food substance shape animal plant body "
                                               "person".split())  # WordNet lexicographer files of things one counts
_ARTICLE_OPENS = re.compile(r"(an?)(?=\s)", re.IGNORECASE)
_ARTICLE_ENDS = re.compile(r"\b(an?)(\s+)$", re.IGNORECASE)
_WORD_AHEAD = re.compile(r"\s*([^\W_][\w'-]*)")
_ARTICLE_AND_WORD = re.compile(r"\b(an?)\s+([^\W_][\w'-]*)", re.IGNORECASE)
CLAUSE_BOUNDS = (",", ".", ":", "CC", "WDT", "WP")  # tags that end a clause's subject or verb
NEW_SUBJECTS = ("PRP", "EX")  # tags of a subject of its own (`as it's walking`)
SUBORDINATORS = ("as", "while", "because", "when", "where", "if", "since", "though", "although", "until", "after",
                 "before", "whilst")  # a clause of their own follows


@cache
def _engine() -> inflect.engine:
    """inflect's engine, imported on first use: typeguard instruments inflect as it loads (~2.5 s), which a process
    that never inflects (the release stages, a cached caption step) need not pay."""
    import inflect

    engine = inflect.engine()
    for word in AN_INITIALISMS:
        engine.defan(word)
    return engine


def article(word: str) -> str:
    """`a` or `an` before `word`."""
    return _engine().a(word).split()[0]


def disagreeing(text: str, start: int = 0, end: int | None = None) -> list[str]:
    """The a / an of `text` that disagree with the word after them, each as `article word` lower-cased, of those an
    edit `text[start:end]` touches (the article, its word or the space between them inside it; an empty edit: the
    article just before it and the word just after; default: the whole text)."""
    end = len(text) if end is None else end

    def touched(found: re.Match) -> bool:
        return found.start() < end and found.end() > start if end > start else found.start() < start < found.end()

    return [found.group(0).lower() for found in _ARTICLE_AND_WORD.finditer(text)
            if found.group(1).lower() != article(found.group(2)) and touched(found)]


def _word_ahead(text: str) -> str | None:
    found = _WORD_AHEAD.match(text)
    return found.group(1) if found else None


def _agreeing(old: str, word: str) -> str:
    """The article `word` needs, in the case of `old` (a, A, AN)."""
    new = article(word)
    if old.isupper() and len(old) > 1:
        return new.upper()
    return new.capitalize() if old[0].isupper() else new


def agree(caption: str, start: int, end: int, substitute: str) -> tuple[int, str]:
    """The edit `caption[start:end] -> substitute` as (start, substitute) with its articles agreeing: an article the
    substitute opens with follows the word after it; the article just before the span is re-chosen for C_c's next
    word whenever the edit changed that word (whether or not it agreed with C_o's: `in an big photo` loses `big` as
    `in a photo`), and when rewritten becomes part of the edit (start moves back to it)."""
    if opening := _ARTICLE_OPENS.match(substitute):
        if word := _word_ahead(substitute[opening.end():] + caption[end:]):
            substitute = _agreeing(opening.group(1), word) + substitute[opening.end():]
    before = _ARTICLE_ENDS.search(caption, 0, start)
    new_word = _word_ahead(substitute + caption[end:])
    changed = new_word is not None and new_word != _word_ahead(caption[start:])
    if before and changed and before.group(1).lower() != article(cast(str, new_word)):  # changed: there is a word
        return before.start(), _agreeing(before.group(1), cast(str, new_word)) + before.group(2) + substitute
    return start, substitute


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


@lru_cache(maxsize=4096)
def thing_senses(word: str) -> tuple[int, ...]:
    """How often (SemCor counts) each WordNet noun sense of `word` itself that names a thing (`THINGS`) was tagged."""
    return tuple(lemma.count() for synset in wordnet.synsets(word.lower(), wordnet.NOUN) if synset.lexname() in THINGS
                 for lemma in synset.lemmas() if lemma.name().lower() == word.lower())


def nominal(token: Token) -> bool:
    """Tagged a noun, or a word WordNet knows as a thing in a tagged sense (a noun the tagger read as an adjective)."""
    return token.tag.startswith("NN") or any(thing_senses(token.text))


def head(tokens: Sequence[Token]) -> int | None:
    """Index of the noun a counted phrase counts: its last noun, or the noun before the -ing words that end it when
    WordNet knows none of them as a thing (participles: `a car driving`); None when no noun comes before them or one
    of them is a thing only in senses no text was tagged with (`a railroad crossing`: ambiguous)."""
    last = i = len(tokens) - 1
    while i > 1 and tokens[i].text.lower().endswith("ing") and not any(thing_senses(tokens[i].text)):
        i -= 1
    if i == last:
        return last
    return i if nominal(tokens[i]) and not any(thing_senses(token.text) for token in tokens[i + 1:]) else None


def recounts(caption: str, start: int, end: int, numbers: tuple[str, ...],
             quantity_nouns: tuple[str, ...]) -> tuple[list[str], str | None]:
    """(rewrites, None) of the counted phrase `caption[start:end]`, its count one step down and one up (those in
    `numbers`; not down to `a` after a determiner: the two dogs); else ([], why not): `not_a_count` (the counting word
    is neither in `numbers` nor a / an), `ambiguous_head`, `not_a_counted_noun` (an -ing head WordNet knows as no
    thing: `one grazing`), `quantity_noun` (a head in `quantity_nouns` before `of`: a lot of, a bunch of)."""
    tagged = tag_caption(caption)
    tokens = [t for t in tagged if start <= t.start and t.end <= end]
    current, counted = count(tokens[0].text, numbers), head(tokens)
    if current is None:
        return [], "not_a_count"
    if counted is None:
        return [], "ambiguous_head"
    noun = tokens[counted]
    if noun.text.lower().endswith("ing") and not any(thing_senses(noun.text)):
        return [], "not_a_counted_noun"
    if (inflect_noun(noun.text, plural=False).lower() in quantity_nouns
            and (_word_ahead(caption[noun.end:]) or "").lower() == "of"):
        return [], "quantity_noun"
    before = [t.tag for t in tagged if t.end <= start][-1:]
    lowest = 2 if before and before[0] in DETERMINERS else 1
    return [_recount(caption, tokens, counted, target, numbers) for target in (current - 1, current + 1)
            if lowest <= target <= len(numbers)], None


def _recount(caption: str, tokens: Sequence[Token], counted: int, target: int, numbers: tuple[str, ...]) -> str:
    first, noun, last = tokens[0], tokens[counted], tokens[-1]
    word = "a" if target == 1 else numbers[target - 1]  # `agree` makes it `an` where the next word needs it
    if first.text[0].isupper():
        word = word[0].upper() + word[1:]
    return (word + caption[first.end:noun.start] + inflect_noun(noun.text, plural=target > 1)
            + caption[noun.end:last.end])


def governing_verb(caption: str, start: int, end: int) -> Token | None:
    """The finite verb whose number the counted phrase `caption[start:end]` sets: the one between `there` and it
    (`there is a dog`), or, when the phrase opens its clause (a subject), the first after it before its clause ends
    or another begins (`a dog on a couch sleeps`, not `a cat pausing as it's walking`); None otherwise (most captions
    have none)."""
    tokens = tag_caption(caption)
    before = [t for t in tokens if t.end <= start]
    if len(before) >= 2 and before[-2].tag == "EX" and before[-1].tag.startswith("VB"):
        return before[-1]
    if before and before[-1].tag not in CLAUSE_BOUNDS:
        return None
    for token in (t for t in tokens if t.start >= end):
        if token.tag in CLAUSE_BOUNDS + NEW_SUBJECTS or token.text.lower() in SUBORDINATORS:
            return None
        if token.tag in ("VBZ", "VBP") or token.text.lower() in ("was", "were"):
            return token
    return None


def verb_agrees(caption: str, start: int, end: int, numbers: tuple[str, ...]) -> bool:
    """The counted phrase `caption[start:end]` (opening with its count) and its governing verb agree in number (or it
    governs none)."""
    verb = governing_verb(caption, start, end)
    if verb is None:
        return True
    counted = count(_word_ahead(caption[start:end]) or "", numbers)
    return counted is None or (counted > 1) == (verb.tag == "VBP" or verb.text.lower() == "were")
