"""Caption-engine throughput: cfgen's stage logic against the one-caption-at-a-time method, at several N.

    python benchmarks/caption_stages.py --n 100 --n 1000                     # tiny random MLM/CLM + real MiniLM
    python benchmarks/caption_stages.py --models DIR --n 100 --n 1000        # paper-shape roberta-base / gpt2-large
    python benchmarks/caption_stages.py --profile paper                      # the published models (their weights)

DIR is what `../shared/tools/make_paper_shape_models.py CAPTIONS DIR` writes. Each (method, N) runs in a fresh
process, so its peak RSS is its own. Stage logic is timed with models loaded (no Prefect, no cache); the fixed costs
(imports, model loading, and `cfgen captions` end to end with its Prefect server) are a separate table.
  cfgen          the stages as the pipeline runs them: batched, a caption's candidates as one token trie.
  one-at-a-time  the same method the way the published script runs it: each caption alone through every stage, each
                 masked site and each candidate alone (similarity embeds C_o with each candidate; perplexity scores
                 each candidate in its own forward pass, no shared prefix), no cache.
Both must select the same C_c for every caption; the table counts the captions where they did not (and, with
--clm-dtype, where a lower-precision causal LM picks another C_c).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from bench import console, in_fresh_process, peak_memory_mib, start, table

ROOT = Path(__file__).resolve().parents[1]
COCO = ROOT.parent / "shared" / "data" / "coco_val2017_captions.tsv"
STAGES = ("sites", "candidates", "similarity", "perplexity")
ONE_AT_A_TIME = ["perplexity.batch_tokens=1", "perplexity.shared_prefix=false"]
PAPER_METHOD = ["sites.types=[noun]", "perplexity.type_shares={noun: 1}"]  # the published method edits nouns only


def measure(source: Path, n: int, overrides: list[str], alone: bool) -> dict:
    """In a fresh process: load every stage's models, then time the stage logic over the first `n` captions."""
    t0 = time.perf_counter()
    import polars as pl

    from tasks.core.config import load_params
    from tasks.text import candidates, ingest, perplexity, similarity, sites

    imported = time.perf_counter() - t0
    params = load_params(ROOT / "params.yaml", overrides + (ONE_AT_A_TIME if alone else []))
    logic = dict(zip(STAGES, (sites, candidates, similarity, perplexity)))
    load, models = {}, {}
    for name in STAGES:
        t = time.perf_counter()
        models[name] = logic[name].load_models(getattr(params, name))
        load[name] = time.perf_counter() - t

    def through(frame: pl.DataFrame, seconds: dict[str, float]) -> pl.DataFrame:
        for name in STAGES:
            if frame.is_empty():  # a caption without candidates stops here, as in the published loop
                break
            # One at a time: every row alone (a site, a candidate), except that perplexity ranks a caption's
            # candidates together (each still scored alone: no shared prefix, one candidate per forward pass).
            parts = frame.iter_slices(1) if alone and name != "perplexity" else [frame]
            t = time.perf_counter()
            frame = pl.concat([logic[name].run(part, getattr(params, name), models[name])[0] for part in parts])
            seconds[name] += time.perf_counter() - t
        return frame

    captions = ingest.read_captions(source)[0]
    through(captions.tail(3), dict.fromkeys(STAGES, 0.0))  # untimed: first-call kernel and allocator set-up
    seconds, selected = dict.fromkeys(STAGES, 0.0), []
    for frame in captions.head(n).iter_slices(1) if alone else [captions.head(n)]:
        selected += through(frame, seconds).select("caption_id", "position", "substitute").rows()
    return {"import": imported, "load": load, "seconds": seconds, "selected": selected, "rss": peak_memory_mib()}


def cli_wall(source: Path, n: int, overrides: list[str]) -> float:
    """Wall time of `cfgen captions` on the first `n` captions: process start, a Prefect server, an empty cache."""
    with tempfile.TemporaryDirectory() as tmp:
        head = Path(tmp) / "captions.tsv"
        head.write_text("".join(source.read_text(encoding="utf-8").splitlines(keepends=True)[:n]), encoding="utf-8")
        cmd = [str(Path(sys.executable).with_name("cfgen")), "captions", str(head), f"{tmp}/out.parquet"]
        env = {**{k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}, "PREFECT_HOME": f"{tmp}/prefect"}
        t = time.perf_counter()
        subprocess.run(cmd + [a for o in overrides for a in ("-p", o)], check=True, env=env, capture_output=True)
        return time.perf_counter() - t


def model_overrides(profile: str, models: Path | None, source: Path, n: int) -> list[str]:
    if models is not None:
        missing = [m for m in ("roberta-base", "gpt2-large") if not (models / m).is_dir()]
        if missing:
            raise typer.BadParameter(f"{models} lacks {', '.join(missing)}: build it with "
                                     "../shared/tools/make_paper_shape_models.py CAPTIONS DIR")
        return [f"candidates.model.{profile}.id={models / 'roberta-base'}",
                f"perplexity.model.{profile}.id={models / 'gpt2-large'}"]
    if profile != "demo":
        return []
    from tasks.core.params import TinyModelsParams
    from tasks.demo import tiny_text
    from tasks.text import ingest  # tiny models trained on these captions' vocabulary, as in the demo

    captions = ingest.read_captions(source)[0].head(n)["caption"].to_list()
    tiny = tiny_text.build(captions, Path(tempfile.mkdtemp()), TinyModelsParams())
    return [f"candidates.model.demo.id={tiny['mlm']}", f"perplexity.model.demo.id={tiny['clm']}"]


def main(n: Annotated[list[int] | None, typer.Option(help="captions from the source (repeatable)")] = None,
         reference_n: Annotated[list[int] | None, typer.Option(help="N at which one-at-a-time also runs")] = None,
         profile: Annotated[str, typer.Option(help="demo or paper")] = "demo",
         models: Annotated[Path | None, typer.Option(help="paper-shape folder (roberta-base, gpt2-large)")] = None,
         clm_dtype: Annotated[str | None, typer.Option(help="also run cfgen with the causal LM in this dtype "
                                                            "(e.g. bfloat16) at the smallest N")] = None,
         cli: Annotated[bool, typer.Option(help="also time `cfgen captions` at the smallest N")] = True,
         source: Path = COCO) -> None:
    sizes, reference = sorted(n or [100, 1000]), sorted(reference_n or [100])
    overrides = [f"profile={profile}", *PAPER_METHOD, *model_overrides(profile, models, source, max(sizes))]
    methods = {"cfgen": ([], False), "one-at-a-time": ([], True)}
    if clm_dtype:
        methods[f"cfgen, CLM {clm_dtype}"] = ([f"perplexity.model.{profile}.dtype={clm_dtype}"], False)
    runs = {}
    for size in sizes:
        for method, (extra, alone) in methods.items():
            if method == "cfgen" or size in reference and alone or size == sizes[0] and method.startswith("cfgen, "):
                runs[size, method] = in_fresh_process(measure, source, size, overrides + extra, alone)
    title = f"caption stages (logic, models loaded), profile={profile}" + (f", models={models}" if models else "")
    stages = table(title, ("N", "method", *(f"{s} s" for s in STAGES), "total s", "captions/s", "peak memory MiB",
                           "time / cfgen time", "C_c differing from cfgen"))
    for (size, method), run in runs.items():
        total, ours = sum(run["seconds"].values()), runs[size, "cfgen"]
        differ = sum(a != b for a, b in zip(run["selected"], ours["selected"], strict=True))
        stages.add_row(str(size), method, *(f"{run['seconds'][s]:.1f}" for s in STAGES), f"{total:.1f}",
                      f"{size / total:.2f}", f"{run['rss']:.0f}", f"{total / sum(ours['seconds'].values()):.2f}x",
                      f"{differ} of {len(ours['selected'])}")
    console.print(stages)
    fixed = table("fixed costs (s)", ("N", "imports", *(f"load {s}" for s in STAGES), "cfgen captions wall",
                                      "wall - cfgen logic"))
    smallest = runs[sizes[0], "cfgen"]
    wall = cli_wall(source, sizes[0], overrides) if cli else None
    logic = sum(smallest["seconds"].values())
    fixed.add_row(str(sizes[0]), f"{smallest['import']:.1f}", *(f"{smallest['load'][s]:.1f}" for s in STAGES),
                  f"{wall:.1f}" if wall else "-", f"{wall - logic:.1f}" if wall else "-")
    console.print(fixed)


if __name__ == "__main__":
    start(main)
