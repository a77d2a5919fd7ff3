"""`quantifier`: a number (tagged CD) or a / an, through the nouns after it (`a dog`, `two brown dogs`, `a car
driving`), its count moved one step down and one up in `candidates.numbers` (`tasks.text.quantities.recounts`, which
finds the noun it counts and makes it agree); a reject where no count comes out right (`quantity_noun`: a lot of;
`ambiguous_head`; `not_a_counted_noun`: one grazing; `not_a_count`: a number off the list)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tasks.core.edits import ARTICLES
from tasks.text.params import CandidatesParams, SitesParams
from tasks.text.quantities import inflect_noun, recounts, thing_senses, verb_agrees
from tasks.text.tagging import Token, tag_caption
from tasks.text.words import WORDS, Site, is_noun

COUNTED_MODIFIERS = ("JJ", "JJR", "JJS", "VBG", "VBN")  # tags between a count and its nouns


def sites(tokens: Sequence[Token], params: SitesParams) -> Iterator[Site]:
    """A counting word, adjectives or participles after it, then nouns: the span ends with the last noun."""
    for i, token in enumerate(tokens):
        if token.tag != "CD" and token.text.lower() not in ARTICLES:  # a / an count as one
            continue
        j = i + 1
        while j < len(tokens) and tokens[j].tag in COUNTED_MODIFIERS:
            j += 1
        if j < len(tokens) and is_noun(tokens[j], params.noun_tags):
            while j + 1 < len(tokens) and is_noun(tokens[j + 1], params.noun_tags):
                j += 1
            yield i, token.start, tokens[j].end


def rewrite(site: dict, params: CandidatesParams) -> tuple[list[str], str | None]:
    return recounts(site["caption"], site["start"], site["end"], params.numbers, params.quantity_nouns)


def defects(row: dict, quantity_nouns: tuple[str, ...], numbers: tuple[str, ...]) -> dict[str, bool]:
    """`plural_participle`: an -ing word that WordNet knows as no thing in a tagged sense pluralised (`car driving`
    -> `car drivings`, `one grazing` -> `two grazings`); `quantity_noun_counted`: a `quantity_nouns` word before `of`
    counted (`a lot of` -> `two lots of`); `verb_disagreement`: the count and the finite verb it governs disagree in
    C_c (`two dogs chases`)."""
    made = set(WORDS.findall(row["substitute"]))
    words, ahead = WORDS.findall(row["original_word"]), WORDS.findall(row["caption"][row["end"]:])[:1]
    return {"plural_participle": any(
                token.text.lower().endswith("ing") and token.text + "s" in made and not any(thing_senses(token.text))
                for token in tag_caption(row["caption"]) if row["start"] <= token.start and token.end <= row["end"]),
            "quantity_noun_counted": bool(words) and ahead == ["of"]
            and inflect_noun(words[-1], plural=False).lower() in quantity_nouns,
            "verb_disagreement": not verb_agrees(row["candidate"], row["start"], row["start"] + len(row["substitute"]),
                                                 numbers)}
