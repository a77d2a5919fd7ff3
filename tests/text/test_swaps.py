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
    ("Dogs chasing cats in a yard", ["Cats chasing dogs in a yard"]),  # each takes the other's initial case
    ("A cat and a dog.", []),  # a coordination says the same swapped
    ("A dog with two cats.", []),  # NN with NNS: the verb and articles would not agree
    ("Two giraffes standing next to a tall tree.", []),  # `giraffes`, tagged NN, is a plural all the same
    ("A group of people on a beach.", []),  # `group of`: a quantity, no thing to swap
    ("A fire hydrant next to a dog.", []),  # a compound noun is no lone noun
    ("A woman's dog near a cat.", ["A dog's woman near a cat.", "A cat's dog near a woman.",  # `woman's`: the
                                   "A woman's cat near a dog."]),  # noun moves, its `'s` stays
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
])
def test_the_two_span_minimal_edit(c_o, c_c, holds):
    assert exchanged(c_o, c_c) is holds
