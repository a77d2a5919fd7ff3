"""The grammar check (`tasks.text.grammar`) of every edit type on COCO captions: sites + candidates of all six types
with a tiny random masked LM whose vocabulary is trained on those captions (`tasks.tiny.text`, seed 0: random
fills, the hardest case for the finished-caption checks), then each defect counted per type.

    python benchmarks/grammar_check.py                         # all 25,014 captions
    python benchmarks/grammar_check.py --first 6000 --count 3000

Prints, per edit type, the candidates made, the rows with each defect (goal: 0) and the candidates' own rejects by
reason.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import polars as pl
from bench import ROOT, console, start, table

from tasks.core.edits import EDIT_TYPES
from tasks.core.specs import ModelSpec
from tasks.demo.params import TinyModelsParams
from tasks.text import candidates, grammar, sites
from tasks.text.ingest import read_captions
from tasks.text.params import CandidatesParams, SitesParams
from tasks.tiny.text import build

CAPTIONS = ROOT.parent / "shared" / "data" / "coco_val2017_captions.tsv"


def main(first: int = 0, count: int | None = None) -> None:
    os.environ.setdefault("NLTK_DATA", str(ROOT.parent / "shared" / "nltk_data"))
    captions = read_captions(CAPTIONS)[0].slice(first, count)
    with tempfile.TemporaryDirectory() as folder:
        models = build(captions["caption"].to_list(), Path(folder), TinyModelsParams())
        params = CandidatesParams(model=ModelSpec(id=str(models["mlm"])), batch_size=64)
        started = time.perf_counter()
        found, _ = sites.run(captions, SitesParams(types=tuple(EDIT_TYPES)))
        kept, rejects = candidates.run(found, params, candidates.load_models(params))
        wall = time.perf_counter() - started
    result = table(f"Grammar check, COCO val2017 captions {first:,}-{first + captions.height:,} ({wall:.0f} s)",
                   ["edit type", "candidates", *grammar.DEFECTS])
    for edit_type in (*EDIT_TYPES, None):
        rows = kept if edit_type is None else kept.filter(pl.col("edit_type") == edit_type)
        found_defects = grammar.count(rows, params.quantity_nouns, params.numbers)
        result.add_row(edit_type or "all", f"{rows.height:,}", *(str(found_defects[d]) for d in grammar.DEFECTS))
    console.print(result)
    reasons = table("Candidates' rejects by reason", ["reason", "rows"])
    for reason, rows in rejects.group_by("reason").len().sort("len", descending=True).iter_rows():
        reasons.add_row(reason, f"{rows:,}")
    console.print(reasons)


if __name__ == "__main__":
    start(main)
