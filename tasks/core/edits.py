"""Edit types, declared once each: every stage looks a type's facts up here (`EDIT_TYPES`), none branches on its name.

A type is a class. Its docstring is what the datasheet says of it: the first paragraph its description, any further
paragraph a caveat printed when the type ran (a docstring is no code: editing one re-keys no cache). Its attributes
are the facts the stages read. Its text behaviours are functions of `tasks.text.edits.<name>` (`behaviour`):
`sites(tokens, params)` where it may edit C_o; `check_fill(tag, fill, site, params)` (a masked-LM type: why a fill is
no candidate, or None) or `rewrite(site, params)` (a rule type: its span rewrites, or the reason there are none); and
`defects(row, quantity_nouns, numbers)` when it declares `defects`.

Adding a type: its class here (and in `EDIT_TYPES`), its module under `tasks/text/edits/`, and its `params.yaml`
entries (`sites.types`, `judge.templates`, a `similarity.upper_by_type` bound if it needs its own).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, ClassVar, Literal, cast

ARTICLES = ("a", "an")


class Edit:
    name: ClassVar[str]
    masked: ClassVar[bool]  # filled by the masked LM (`check_fill`), else by rule (`rewrite`)
    inserts: ClassVar[bool] = False  # its span is empty: a fill brings its space and one token more
    subjects: ClassVar[bool] = False  # its two spans name what each image shows: selection's both-subjects check
    relations: ClassVar[bool] = False  # a word substitution, checked against WordNet's relations
    counts: ClassVar[bool] = False  # an a / an opening its span is its count, one of its edited words
    defects: ClassVar[tuple[str, ...]] = ()  # its own grammar defects (`defects`), beyond every type's
    rejects: ClassVar[tuple[str, ...]] = ()  # those of them that make a candidate no C_c


class Noun(Edit):
    """one noun swapped for a masked-LM fill (the paper's edit)"""

    name, masked, subjects, relations = "noun", True, True, True


class Lexical(Edit):
    """one adjective or verb swapped for a masked-LM fill with the same part-of-speech tag"""

    name, masked, relations = "lexical", True, True


class Quantifier(Edit):
    """a count moved one step (a → two, two → three / a), its noun made to agree

    **Counting edits** (`quantifier`): the paper's error analysis attributes 6% of its errors to a wrong number of
    objects, and diffusion models often miscount, so check these pairs before use; a changed count can also leave a
    verb disagreeing with its subject.
    """

    name, masked, counts = "quantifier", False, True
    defects = ("plural_participle", "verb_disagreement", "quantity_noun_counted")
    rejects = ("verb_disagreement",)


class Insert(Edit):
    """an adjective inserted before a noun by the masked LM"""

    name, masked, inserts = "insert", True, True
    defects = ("inserted_non_adjective",)


class Delete(Edit):
    """an adjective or a prepositional phrase deleted"""

    name, masked = "delete", False
    defects = ("head_noun_deleted",)


class Swap(Edit):
    """two nouns, or two adjectives, of one caption exchanged (a dog on a couch → a couch on a dog)"""

    name, masked, subjects = "swap", False, True  # its two phrases: both words are in both images
    defects = ("swap_not_exchanged", "swap_list_reorder", "swap_possessive", "swap_across_pronoun",
               "swap_across_sentences")


EDIT_TYPES: dict[str, type[Edit]] = {t.name: t for t in (Noun, Lexical, Quantifier, Insert, Delete, Swap)}
if TYPE_CHECKING:  # built from EDIT_TYPES, so a new type is one line: to a checker, any name
    EditType = str
else:
    EditType = Literal[tuple(EDIT_TYPES)]  # a params field naming one


def described(name: str) -> tuple[str, str | None]:
    """(the type's description, its caveat or None) from its docstring, each paragraph on one line."""
    doc = cast(str, EDIT_TYPES[name].__doc__)  # every type has one: its description
    first, *rest = (" ".join(p.split()) for p in inspect.cleandoc(doc).split("\n\n"))
    return first, "\n\n".join(rest) or None


def behaviour(name: str, function: str) -> str:
    """`"module:name"` of one of the type's text behaviours."""
    return f"tasks.text.edits.{name}:{function}"


def behaviours(function: str) -> tuple[str, ...]:
    """`"module:name"` of `function` of every type that has it: what the code keys of a step running them hold."""
    has = {"sites": lambda t: True, "check_fill": lambda t: t.masked, "rewrite": lambda t: not t.masked,
           "defects": lambda t: bool(t.defects)}[function]
    return tuple(behaviour(name, function) for name, t in EDIT_TYPES.items() if has(t))


def edited_word(span: str, edit_type: str) -> str:
    """The word(s) of an edit's `original_word` or `substitute` span, stripped, without the article the span takes
    along when the edit makes a / an agree ("an apple" -> "apple"); a count's article is its count, kept."""
    words = span.strip()
    first, _, rest = words.partition(" ")
    return rest if not EDIT_TYPES[edit_type].counts and first.lower() in ARTICLES and rest else words
