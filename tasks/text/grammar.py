"""Grammar check of candidate rows: the defects a rule-made or masked-LM edit must not bring into C_c, counted.

  plural_participle       a quantifier pluralised an -ing word that WordNet knows as no thing in a tagged sense
                          (`car driving` -> `car drivings`, `one grazing` -> `two grazings`)
  article_disagreement    C_c has more a / an disagreeing with the next word's sound (inflect's rule) than C_o
  repeated_word           C_c has more words repeated right after themselves than C_o (`a bicycle bicycle`)
  verb_disagreement       a quantifier's count and the finite verb it governs disagree in C_c (`two dogs chases`)
  quantity_noun_counted   a quantifier counted a `quantity_nouns` word before `of` (`a lot of` -> `two lots of`)
  inserted_non_adjective  an insert's word is one WordNet knows as no adjective (`a across suitcase`)
  head_noun_deleted       a delete removed a word WordNet knows as a noun, not an adjective (one the tagger read
                          as an adjective), before a word that may be no noun (`in a kitchen start` -> `in a start`)
  swap_not_exchanged      a swap's C_c is not C_o with two different words exchanged, each cased by the swap's rule,
                          and only a / an else changed (`swaps.exchanged`: `A TV on a table` -> `A Table on a TV`)
  swap_list_reorder       the two swapped words have a comma or a coordination between them: items of one list
  swap_possessive         a swapped word is a possessor or possessed (`'s` next to it: `a dog's toy` -> `a toy's dog`)
  swap_across_sentences   the two swapped words are in different sentences
Each rule reads C_o, the edit and WordNet / inflect only, not how the stages chose the edit.
"""

from __future__ import annotations

import re

import polars as pl
from nltk.corpus import wordnet

from tasks.text.quantities import ARTICLES, disagreements, inflect_noun, thing_senses, verb_agrees
from tasks.text.sites import noun_only
from tasks.text.swaps import WORD, exchanged, opens_sentence
from tasks.text.tagging import tag_caption

DEFECTS = ("plural_participle", "article_disagreement", "repeated_word", "verb_disagreement", "quantity_noun_counted",
           "inserted_non_adjective", "head_noun_deleted", "swap_not_exchanged", "swap_list_reorder",
           "swap_possessive", "swap_across_sentences")
_WORDS = re.compile(r"[^\W_][\w'-]*")


def repeats(text: str) -> int:
    """How many words of `text` repeat the word right before them (case aside)."""
    words = [w.lower() for w in _WORDS.findall(text)]
    return sum(a == b for a, b in zip(words, words[1:]))


def _plural_participle(row: dict) -> bool:
    made = set(_WORDS.findall(row["substitute"]))
    return any(token.text.lower().endswith("ing") and token.text + "s" in made and not any(thing_senses(token.text))
               for token in tag_caption(row["caption"]) if row["start"] <= token.start and token.end <= row["end"])


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


def _inserted_non_adjective(row: dict) -> bool:
    inserted = [w for w in _WORDS.findall(row["substitute"]) if w.lower() not in ARTICLES]
    return not any(wordnet.synsets(w.lower(), wordnet.ADJ) for w in inserted)


def _swap_defects(row: dict) -> dict[str, bool]:
    """The swap rules, on the two words of C_o that C_c exchanged (its first and last differing words)."""
    caption = row["caption"]
    o, c = list(WORD.finditer(caption)), WORD.findall(row["candidate"])
    differ = [i for i, (a, b) in enumerate(zip(o, c)) if a.group().lower() != b.lower()
              and not {a.group().lower(), b.lower()} <= set(ARTICLES)]
    if len(o) != len(c) or len(differ) < 2:
        return {}
    first, second = o[differ[0]], o[differ[-1]]
    tokens = tag_caption(caption)
    at = [i for i, t in enumerate(tokens) if t.start in (first.start(), second.start())]
    between = tokens[at[0] + 1:at[-1]] if len(at) == 2 else ()
    near = {tokens[j].tag for i in at for j in (i - 1, i + 1) if 0 <= j < len(tokens)}
    return {"swap_list_reorder": any(t.tag in (",", "CC") for t in between),
            "swap_possessive": "POS" in near,
            "swap_across_sentences": opens_sentence(caption, second.start()) or any(t.tag == "." for t in between)}


def defects(row: dict, quantity_nouns: tuple[str, ...], numbers: tuple[str, ...]) -> list[str]:
    """The `DEFECTS` of one candidate row (a `candidates` schema dict)."""
    found = {"article_disagreement": disagreements(row["candidate"]) > disagreements(row["caption"]),
             "repeated_word": repeats(row["candidate"]) > repeats(row["caption"])}
    if row["edit_type"] == "quantifier":
        found |= {"plural_participle": _plural_participle(row),
                  "quantity_noun_counted": _quantity_noun_counted(row, quantity_nouns),
                  "verb_disagreement": not verb_agrees(row["candidate"], row["start"],
                                                       row["start"] + len(row["substitute"]), numbers)}
    if row["edit_type"] == "insert":
        found["inserted_non_adjective"] = _inserted_non_adjective(row)
    if row["edit_type"] == "delete":
        found["head_noun_deleted"] = _head_noun_deleted(row)
    if row["edit_type"] == "swap":
        found |= {"swap_not_exchanged": not exchanged(row["caption"], row["candidate"]), **_swap_defects(row)}
    return [defect for defect in DEFECTS if found.get(defect)]


def count(candidates: pl.DataFrame, quantity_nouns: tuple[str, ...], numbers: tuple[str, ...]) -> dict[str, int]:
    """Rows with each of the `DEFECTS` among `candidates`."""
    totals = dict.fromkeys(DEFECTS, 0)
    for row in candidates.iter_rows(named=True):
        for defect in defects(row, quantity_nouns, numbers):
            totals[defect] += 1
    return totals
