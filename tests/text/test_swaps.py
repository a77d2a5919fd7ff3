"""Swap edits (`tasks.text.swaps`, issue 35): the sites `sites` finds and the rewrites `candidates` makes on
hand-made captions, through both stages' real code, and the two-span minimal edit (`exchanged`) they keep."""

from __future__ import annotations

import polars as pl
import pytest

from tasks.core.specs import ModelSpec
from tasks.text import candidates, sites
from tasks.text.params import CandidatesParams, SitesParams
from tasks.text.swaps import exchanged
from tests.conftest import requires_nltk

pytestmark = requires_nltk
RULE_MADE = CandidatesParams(model=ModelSpec(id="unused: a swap needs no masked LM"))


def swapped(caption: str) -> list[str]:
    """Every swap C_c of `caption`, in site order."""
    found, _ = sites.run(pl.DataFrame({"caption_id": ["c"], "image_id": ["i"], "caption": [caption]}),
                         SitesParams(types=("swap",)))
    kept, rejects = candidates.run(found, RULE_MADE, mlm=None)
    assert rejects.height == 0 and (kept["candidate"] == kept.select(
        pl.col("caption").str.slice(0, "start") + pl.col("substitute")
        + pl.col("caption").str.slice(pl.col("end")))["caption"]).all()  # the one-span invariant, over the span
    return kept["candidate"].to_list()


@pytest.mark.parametrize(("caption", "expected"), [
    ("A dog on a couch.", ["A couch on a dog."]),
    ("A red car next to a white house.", ["A red house next to a white car.", "A white car next to a red house."]),
    ("A dog sitting on an ottoman.", ["An ottoman sitting on a dog."]),  # both articles agree
    ("Dogs chasing cats in a yard", ["Cats chasing dogs in a yard"]),  # a sentence's initial capital stays put
    ("dogs chasing cats in a yard", ["cats chasing dogs in a yard"]),  # ... and so does its small letter
    ("A TV on a table.", ["A table on a TV."]),  # an acronym stays upper case, a common noun lower case
    ("A cat and a dog.", []),  # a coordination says the same swapped
    ("A dog with two cats.", []),  # NN with NNS: the verb and articles would not agree
    ("Two giraffes standing next to a tall tree.", []),  # `giraffes`, tagged NN, is a plural all the same
    ("A group of people on a beach.", []),  # `group of`: a quantity, no thing to swap
    ("A fire hydrant next to a dog.", []),  # a compound noun is no lone noun
    ("A woman's dog near a cat.", []),  # a possessor or a possessed noun moved: `a dog's woman`
    ("A dog's toy on a cat's bed.", []),
    ("A man's red car near a blue house.", []),  # a possessed phrase: `a man's red house`, nor its adjective
    ("A dog looking at it's cat on a couch.", []),  # `it's` read as its: `it's couch on a cat`, `a couch ... dog`
    ("A dog with its toy on a bed.", []),  # a possessive owns what follows it, and none is crossed
    ("A cat on a bed as it is looking at a dog.", ["A bed on a cat as it is looking at a dog."]),  # `it` not crossed
    ("A dog near a man's car by a tree.", []),  # a possessive they do not own between them
    ("A bathroom with a vanity, toilet and shower.", ["A vanity with a bathroom, toilet and shower."]),  # no list
    ("A dog on a rug. A cat on a couch.", ["A rug on a dog. A cat on a couch.",  # items reordered, no word moved
                                           "A dog on a rug. A couch on a cat."]),  # to another sentence
    ("A big dog on a big couch.", ["A big couch on a big dog."]),  # the same adjective twice: no adjective swap
])
def test_swap_sites_and_their_rewrites(caption, expected):
    assert swapped(caption) == expected
    assert all(exchanged(caption, c_c) for c_c in expected)


@pytest.mark.parametrize(("c_o", "c_c", "holds"), [
    ("A dog on a couch.", "A couch on a dog.", True),
    ("A dog on an ottoman.", "An ottoman on a dog.", True),  # articles may change with the words after them
    ("A dog on a couch.", "A couch on a cat.", False),  # not the same two words
    ("A dog on a couch.", "A couch near a dog.", False),  # a third word changed
    ("A dog on a couch.", "A couch on a dog!", False),  # a character outside the words changed
    ("A dog on a dog.", "A dog on a dog.", False),  # nothing changed
    ("A dog on a couch.", "A cat on a couch.", False),  # one word: a substitution, not a swap
    ("A TV on a table.", "A Table on a tv.", False),  # each word keeps its own case
    ("Dogs chasing cats.", "cats chasing Dogs.", False),  # the sentence's initial capital stays with its place
    ("Dogs chasing cats.", "Cats chasing dogs.", True),
    ("A Dog On A Couch", "A Couch On A Dog", True),  # a title-cased word keeps its capital
])
def test_the_two_span_minimal_edit(c_o, c_c, holds):
    assert exchanged(c_o, c_c) is holds
