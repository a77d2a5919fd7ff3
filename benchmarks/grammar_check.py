"""The grammar check (`tasks.text.grammar`) of every edit type on COCO captions no test reads: sites + candidates of
all six types with the demo's models (the tiny masked LM), then each defect counted per type.

    python benchmarks/grammar_check.py --first 6000 --count 3000

Prints, per edit type, the candidates made and the rows with each defect (goal: 0).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import polars as pl
from bench import ROOT, console, start, table

from tasks.core.schemas import EDIT_TYPES
from tasks.core.specs import ModelSpec
from tasks.text import candidates, grammar, sites
from tasks.text.ingest import read_captions
from tasks.text.params import CandidatesParams, SitesParams

CAPTIONS = ROOT.parent / "shared" / "data" / "coco_val2017_captions.tsv"


def main(first: int = 6000, count: int = 3000, mlm: Path = ROOT / "models" / "demo" / "mlm") -> None:
    os.environ.setdefault("NLTK_DATA", str(ROOT.parent / "shared" / "nltk_data"))
    captions = read_captions(CAPTIONS)[0].slice(first, count)
    params = CandidatesParams(model=ModelSpec(id=str(mlm)), batch_size=64)
    started = time.perf_counter()
    found, _ = sites.run(captions, SitesParams(types=EDIT_TYPES))
    kept, _ = candidates.run(found, params, candidates.load_models(params))
    wall = time.perf_counter() - started
    result = table(f"Grammar check, COCO val2017 captions {first:,}-{first + count:,} ({wall:.0f} s)",
                   ["edit type", "candidates", *grammar.DEFECTS])
    for edit_type in (*EDIT_TYPES, None):
        rows = kept if edit_type is None else kept.filter(pl.col("edit_type") == edit_type)
        found_defects = grammar.count(rows, params.quantity_nouns)
        result.add_row(edit_type or "all", f"{rows.height:,}", *(str(found_defects[d]) for d in grammar.DEFECTS))
    console.print(result)


if __name__ == "__main__":
    start(main)
