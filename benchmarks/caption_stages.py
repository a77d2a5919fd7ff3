"""Caption-engine throughput: captions/s per stage and end to end, peak RSS, on N shared COCO captions.

    python benchmarks/caption_stages.py --n 1000                 # tiny random MLM/CLM + real MiniLM, CPU
    python benchmarks/caption_stages.py --n 1000 --profile paper # the published models (needs their weights)

Stage logic is timed directly (no Prefect, no cache), models loaded before the clock starts; the model-load time
is reported separately.
"""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tasks import candidates, ingest, nouns, perplexity, similarity, tiny_text
from tasks.params import TinyModelsParams, load_params

ROOT = Path(__file__).resolve().parents[1]
COCO = ROOT.parent / "shared" / "data" / "coco_val2017_captions.tsv"


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(n: Annotated[int, typer.Option(help="captions from the shared COCO file")] = 1000,
         profile: Annotated[str, typer.Option(help="demo (tiny models) or paper")] = "demo",
         source: Path = COCO) -> None:
    captions = ingest.read_captions(source)[0].head(n)
    overrides = [f"profile={profile}"]
    if profile == "demo":  # tiny models trained on these captions' vocabulary, like the demo pipeline's
        tiny = tiny_text.build(captions["caption"].to_list(), Path(tempfile.mkdtemp()), TinyModelsParams())
        overrides += [f"candidates.model.demo.id={tiny['mlm']}", f"perplexity.model.demo.id={tiny['clm']}"]
    params = load_params(ROOT / "params.yaml", overrides)
    stages = [(name, logic, getattr(params, name)) for name, logic in (
        ("nouns", nouns), ("candidates", candidates), ("similarity", similarity), ("perplexity", perplexity))]
    table = Table(title=f"caption stages, {n} COCO captions, profile={profile}")
    for column in ("stage", "rows in", "rows out", "load s", "run s", "captions/s", "peak RSS MiB"):
        table.add_column(column, justify="right")
    frame, total = captions, 0.0
    for name, logic, params in stages:
        t0 = time.perf_counter()
        models = logic.load_models(params)
        t1 = time.perf_counter()
        out, _ = logic.run(frame, params, models)
        t2 = time.perf_counter()
        total += t2 - t1
        table.add_row(name, str(frame.height), str(out.height), f"{t1 - t0:.1f}", f"{t2 - t1:.1f}",
                      f"{n / (t2 - t1):.1f}", f"{peak_rss_mib():.0f}")
        frame = out
    table.add_row("end to end", str(n), str(frame.height), "", f"{total:.1f}", f"{n / total:.1f}",
                  f"{peak_rss_mib():.0f}")
    Console().print(table)


if __name__ == "__main__":
    typer.run(main)
