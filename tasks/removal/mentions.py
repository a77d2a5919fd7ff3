"""Which COCO classes a caption names: the noun phrases of an NLTK `RegexpParser` grammar and the class words in them.

A noun phrase is an `NP` chunk of the grammar over `tasks.text.tagging.tag_caption`'s tokens. It names the classes
whose words (`class_words.yaml`) occur in it as whole words, case-insensitively, a longer name winning over the
words inside it ("a hot dog" names hot dog, not dog). The gallery of the ODmAP@k metric labels every caption so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import polars as pl
import yaml

from tasks.core import schemas
from tasks.core.errors import UserError
from tasks.text.tagging import Token, chunker, tag_caption

ClassWords = dict[str, tuple[str, ...]]
CLASS_WORDS = Path(__file__).with_name("class_words.yaml")  # the shipped list (from CHAIR's synonyms + plurals)

_WORD = re.compile(r"[a-z0-9]+")


class Phrase(NamedTuple):
    start: int
    end: int
    text: str


def load_class_words(path: Path) -> ClassWords:
    """COCO class -> its words, lowercased with single spaces; a malformed file is a one-line `UserError`."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"class words {path}: cannot read it: {' '.join(str(e).split())}") from None
    if not isinstance(raw, dict) or not raw:
        raise UserError(f"class words {path}: expected a mapping of COCO class name -> list of words")
    class_words: ClassWords = {}
    owner: dict[str, str] = {}
    for name, words in raw.items():
        if not (isinstance(name, str) and name.strip() and isinstance(words, list) and words
                and all(isinstance(w, str) and w.strip() for w in words)):
            raise UserError(f"class words {path}: {name!r} must be a class name with a non-empty list of words")
        normalised = tuple(dict.fromkeys(" ".join(w.lower().split()) for w in words))
        for word in normalised:
            if owner.setdefault(word, name) != name:
                raise UserError(f"class words {path}: {word!r} names both {owner[word]!r} and {name!r}")
        class_words[name] = normalised
    return class_words


@lru_cache(maxsize=8)
def _index(items: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[dict[tuple[str, ...], str], int]:
    """(word sequence -> class, the longest sequence's length)."""
    index = {tuple(_WORD.findall(word)): name for name, words in items for word in words}
    return index, max(map(len, index), default=0)


def chunks(tokens: Sequence[Token], grammar: str) -> list[tuple[int, int]]:
    """Token ranges [s, e) of the NP chunks, in order (an NP nested in another counts once, as the outer one)."""
    if not tokens:
        return []
    tree = chunker(grammar).parse([(i, t.tag) for i, t in enumerate(tokens)])
    ranges: list[tuple[int, int]] = []
    for subtree in tree.subtrees(lambda t: t.label() == "NP"):
        leaves = [i for i, _ in subtree.leaves()]
        if leaves and not (ranges and leaves[0] < ranges[-1][1]):
            ranges.append((leaves[0], leaves[-1] + 1))
    return ranges


def phrase(caption: str, tokens: Sequence[Token], s: int, e: int) -> Phrase:
    return Phrase(tokens[s].start, tokens[e - 1].end, caption[tokens[s].start:tokens[e - 1].end])


def noun_phrases(caption: str, grammar: str) -> list[Phrase]:
    tokens = tag_caption(caption)
    return [phrase(caption, tokens, s, e) for s, e in chunks(tokens, grammar)]


def classes_in(phrase_text: str, class_words: ClassWords) -> set[str]:
    index, longest = _index(tuple(class_words.items()))
    words, found, i = _WORD.findall(phrase_text.lower()), set(), 0
    while i < len(words):
        n = next((n for n in range(min(longest, len(words) - i), 0, -1) if tuple(words[i:i + n]) in index), 0)
        if n:
            found.add(index[tuple(words[i:i + n])])
        i += max(n, 1)
    return found


def mentioned(caption: str, grammar: str, class_words: ClassWords) -> set[str]:
    return set().union(*(classes_in(p.text, class_words) for p in noun_phrases(caption, grammar)))


def gallery(captions: pl.DataFrame, grammar: str, class_words: ClassWords) -> pl.DataFrame:
    """Every caption with the sorted classes its noun phrases name (the retrieval gallery's labels)."""
    rows = [{**row, "classes": sorted(mentioned(row["caption"], grammar, class_words))}
            for row in captions.select("caption_id", "image_id", "caption").iter_rows(named=True)]
    return pl.DataFrame(rows, schema=schemas.REMOVAL_GALLERY)
