"""Grammar check of candidate rows: the defects a rule-made or masked-LM edit must not bring into C_c, counted.

  plural_participle       a quantifier pluralised an -ing word that followed a noun in C_o (`quantities.nominal`)
                          and that WordNet knows as no thing in a tagged sense (`car driving` -> `car drivings`)
  article_disagreement    C_c has more a / an disagreeing with the next word's sound (inflect's rule) than C_o
  quantity_noun_counted   a quantifier counted a `quantity_nouns` word before `of` (`a lot of` -> `two lots of`)
  head_noun_deleted       a delete removed a word WordNet knows as a noun, not an adjective (one the tagger read
                          as an adjective), before a word that may be no noun (`in a kitchen start` -> `in a start`)
  swap_not_exchanged      a swap's C_c is not C_o with two different words exchanged and only a / an else changed
                          (`swaps.exchanged`, the two-span minimal edit)
Each rule reads C_o, the edit and WordNet / inflect only, not how the stages chose the edit.
"""

from __future__ import annotations

import re

import polars as pl
from nltk.corpus import wordnet

from tasks.text.quantities import ARTICLES, article, inflect_noun, nominal, thing_senses
from tasks.text.sites import noun_only
from tasks.text.swaps import exchanged
from tasks.text.tagging import tag_caption

DEFECTS = ("plural_participle", "article_disagreement", "quantity_noun_counted", "head_noun_deleted",
           "swap_not_exchanged")
_ARTICLE_AND_WORD = re.compile(r"\b(an?)\s+([^\W_][\w'-]*)", re.IGNORECASE)
_WORDS = re.compile(r"[^\W_][\w'-]*")


def disagreements(text: str) -> int:
    """How many a / an in `text` disagree with the word after them."""
    return sum(found.group(1).lower() != article(found.group(2)) for found in _ARTICLE_AND_WORD.finditer(text))


def _plural_participle(row: dict) -> bool:
    tokens = [t for t in tag_caption(row["caption"]) if row["start"] <= t.start and t.end <= row["end"]]
    made = set(_WORDS.findall(row["substitute"]))
    return any(token.text.lower().endswith("ing") and nominal(before) and token.text + "s" in made
               and not any(thing_senses(token.text)) for before, token in zip(tokens, tokens[1:]))


def _quantity_noun_counted(row: dict, quantity_nouns: tuple[str, ...]) -> bool:
    words, ahead = _WORDS.findall(row["original_word"]), _WORDS.findall(row["caption"][row["end"]:])[:1]
    return bool(words) and ahead == ["of"] and inflect_noun(words[-1], plural=False).lower() in quantity_nouns


def _surely_a_noun(caption: str, at: int) -> bool:
    """The token at character `at` is tagged a noun and WordNet knows it as a noun, never as an adjective or verb."""
    return any(t.tag.startswith("NN") and noun_only(t.text) and not wordnet.synsets(t.text.lower(), wordnet.VERB)
               for t in tag_caption(caption) if t.start == at)


def _head_noun_deleted(row: dict) -> bool:
    deleted = [w for w in _WORDS.findall(row["original_word"]) if w.lower() not in ARTICLES]  # an article agreeing
    return len(deleted) == 1 and noun_only(deleted[0]) and not _surely_a_noun(row["caption"], row["end"])


def defects(row: dict, quantity_nouns: tuple[str, ...]) -> list[str]:
    """The `DEFECTS` of one candidate row (a `candidates` schema dict)."""
    found = {"article_disagreement": disagreements(row["candidate"]) > disagreements(row["caption"])}
    if row["edit_type"] == "quantifier":
        found |= {"plural_participle": _plural_participle(row),
                  "quantity_noun_counted": _quantity_noun_counted(row, quantity_nouns)}
    if row["edit_type"] == "delete":
        found["head_noun_deleted"] = _head_noun_deleted(row)
    if row["edit_type"] == "swap":
        found["swap_not_exchanged"] = not exchanged(row["caption"], row["candidate"])
    return [defect for defect in DEFECTS if found.get(defect)]


def count(candidates: pl.DataFrame, quantity_nouns: tuple[str, ...]) -> dict[str, int]:
    """Rows with each of the `DEFECTS` among `candidates`."""
    totals = dict.fromkeys(DEFECTS, 0)
    for row in candidates.iter_rows(named=True):
        for defect in defects(row, quantity_nouns):
            totals[defect] += 1
    return totals
