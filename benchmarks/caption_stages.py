"""Caption-engine throughput: cfgen's stage logic against the one-caption-at-a-time method, at several N.

    python benchmarks/caption_stages.py --n 100 --n 1000                     # tiny random MLM/CLM + real MiniLM
    python benchmarks/caption_stages.py --models DIR --n 100 --n 1000        # paper-shape roberta-base / gpt2-large
    python benchmarks/caption_stages.py --profile paper                      # the published models (their weights)

DIR is what `../shared/tools/make_paper_shape_models.py CAPTIONS DIR` writes. Each (method, N) run is a fresh
process, so its peak RSS is its own; every (method, N), and the `cfgen captions` run, repeats `--repeats` times in
rounds (A B C A B C ...), and the tables print median (min–max). Stage logic is timed with models loaded (no Prefect,
no cache); the fixed costs (imports, model loading, and `cfgen captions` end to end with its Prefect server, the
stage logic inside that same call and the rest) are a separate table. Each table's legend says what every column
measures.
  cfgen          the stages as the pipeline runs them: batched, a caption's candidates as one token trie.
  one-at-a-time  the same method the way the published script runs it: each caption alone through every stage, each
                 masked site and each candidate alone (similarity embeds C_o with each candidate; perplexity scores
                 each candidate in its own forward pass, no shared prefix), no cache.
Both must select the same C_c for every caption; the table counts the captions where they did not (and, with
--clm-dtype, where a lower-precision causal LM picks another C_c).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from bench import (
    Repeats,
    alternating,
    console,
    in_fresh_process,
    peak_memory_mib,
    ratio,
    spread,
    start,
    table,
    time_inside,
)
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
COCO = ROOT.parent / "shared" / "data" / "coco_val2017_captions.tsv"
STAGES = ("sites", "candidates", "similarity", "perplexity")
ONE_AT_A_TIME = ["perplexity.batch_tokens=1", "perplexity.shared_prefix=false"]
PAPER_METHOD = ["sites.types=[noun]", "perplexity.type_shares={noun: 1}"]  # the published method edits nouns only


def measure(source: Path, n: int, overrides: list[str], alone: bool) -> dict:
    """In a fresh process: load every stage's models, then time the stage logic over the first `n` captions."""
    t0 = time.perf_counter()
    import polars as pl

    from tasks.config import load_params
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


def cli_run(source: Path, n: int, overrides: list[str]) -> dict:
    """In a fresh process: `cfgen captions` on the first `n` captions, called through its typer app (a temporary
    Prefect server, an empty result cache); its wall and, in the same call, the seconds inside every caption step's
    `run` and `load_models` (all shards)."""
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.pop("PREFECT_API_URL", None)  # a temporary server of its own, as a user's first run starts
        os.environ.update(PREFECT_HOME=f"{tmp}/prefect", PREFECT_LOGGING_LEVEL="WARNING")
        head = Path(tmp) / "captions.tsv"
        head.write_text("".join(source.read_text(encoding="utf-8").splitlines(keepends=True)[:n]), encoding="utf-8")
        from flows.cli import app
        from tasks.stages import caption_steps, stage

        spent = {"run": [0.0], "load_models": [0.0]}
        for name in caption_steps():  # each step's logic timed where the stage looks it up
            for function, seconds in spent.items():
                time_inside(stage(name).logic, function, seconds)
        with output_to(Path(tmp) / "cfgen.log") as log:
            code = app(["captions", str(head), f"{tmp}/out.parquet", *(a for o in overrides for a in ("-p", o))],
                       standalone_mode=False)
        if code:
            raise RuntimeError(f"cfgen captions exited {code}:\n{log.read_text()[-4000:]}")
    return {"wall": time.perf_counter() - began, "run": spent["run"][0], "load": spent["load_models"][0]}


@contextmanager
def output_to(log: Path) -> Iterator[Path]:
    """Send this process's stdout and stderr (file descriptors 1 and 2: Prefect's server and logs) to `log`."""
    saved = [os.dup(fd) for fd in (1, 2)]
    with log.open("w") as sink:
        for fd in (1, 2):
            os.dup2(sink.fileno(), fd)
        try:
            yield log
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)


def model_overrides(profile: str, models: Path | None, source: Path, n: int, scratch: Path) -> list[str]:
    if models is not None:
        missing = [m for m in ("roberta-base", "gpt2-large") if not (models / m).is_dir()]
        if missing:
            raise typer.BadParameter(f"{models} lacks {', '.join(missing)}: build it with "
                                     "../shared/tools/make_paper_shape_models.py CAPTIONS DIR")
        return [f"candidates.model.{profile}.id={models / 'roberta-base'}",
                f"perplexity.model.{profile}.id={models / 'gpt2-large'}"]
    if profile != "demo":
        return []
    from tasks.demo.params import TinyModelsParams
    from tasks.text import ingest  # tiny models trained on these captions' vocabulary, as in the demo
    from tasks.tiny import text as tiny_text

    captions = ingest.read_captions(source)[0].head(n)["caption"].to_list()
    tiny = tiny_text.build(captions, scratch, TinyModelsParams())
    return [f"candidates.model.demo.id={tiny['mlm']}", f"perplexity.model.demo.id={tiny['clm']}"]


STAGE_LEGEND = (
    "<stage> s: wall seconds inside that stage's `run` over all N captions (a total, not per caption), timed in the "
    "run's own fresh process with its models loaded, after one untimed warm-up on 3 other captions.",
    "total s: the four stages' sum in one run; captions/s: N / total s of that run.",
    "peak memory MiB: that process's peak RSS (peak CUDA memory allocated when it used a GPU), loading included.",
    "total / cfgen: the ratio of the median totals, then (min–max) of total_i / cfgen total_i, the runs of round i "
    "being adjacent.",
    "C_c differing from cfgen: selected (caption, position, substitute) rows that differ from cfgen's in the same "
    "round, of cfgen's selected rows.",
)
FIXED_LEGEND = (
    "imports s, load <stage> s: in the cfgen runs of the table above (their processes): wall seconds of importing "
    "the stage modules (polars, torch, transformers, ...) and of each stage's `load_models`.",
    "cfgen captions wall s: `cfgen captions` on the first N captions, called through its typer app in a fresh "
    "process of its own, from the call's start (CLI imports included, interpreter start not) to its return: a "
    "temporary Prefect server, every caption step (ingest, sites, saliency, candidates, relations, similarity, "
    "perplexity; a skipped step passes its rows through) on an empty result cache, parquet written.",
    "inside run s / inside load_models s: seconds inside the caption steps' `run` / `load_models` (all steps and "
    "shards), timed in that same process during that same call.",
    "rest s: wall − inside run − inside load_models, each run's own three numbers (one process, one call): imports, "
    "the Prefect server and task machinery, parquet IO.",
)


def stage_table(title: str, runs: dict, repeats: int) -> Table:
    """Per (N, method): each stage's seconds, total, captions/s, peak memory, the ratio to cfgen and C_c that
    differ."""
    result = table(f"{title}; median (min–max) of {repeats} runs per row, rows alternating",
                   ("N", "method", *(f"{s} s" for s in STAGES), "total s", "captions/s", "peak memory MiB",
                    "total / cfgen", "C_c differing from cfgen"), STAGE_LEGEND)
    for (size, method), repeated in runs.items():
        totals = [sum(run["seconds"].values()) for run in repeated]
        cfgen = runs[size, "cfgen"]
        differ = [sum(a != b for a, b in zip(run["selected"], ours["selected"], strict=True))
                  for run, ours in zip(repeated, cfgen)]
        result.add_row(str(size), method, *(spread([run["seconds"][s] for run in repeated]) for s in STAGES),
                       spread(totals), spread([size / t for t in totals]), spread([r["rss"] for r in repeated], ".0f"),
                       "–" if method == "cfgen" else ratio(totals, [sum(r["seconds"].values()) for r in cfgen]),
                       f"{spread(differ, '.0f')} of {len(cfgen[0]['selected'])}")
    return result


def fixed_table(size: int, measured: list[dict], cli: list[dict] | None, repeats: int) -> Table:
    """Imports and model loading of the cfgen runs at N = `size`; `cfgen captions` end to end, its stage logic and
    the rest, all three from each CLI run's own process."""
    result = table(f"fixed costs at N={size}: median (min–max) of {repeats} runs, seconds",
                   ("N", "imports s", *(f"load {s} s" for s in STAGES), "cfgen captions wall s", "inside run s",
                    "inside load_models s", "rest s"), FIXED_LEGEND)
    end_to_end = [spread([c["wall"] for c in cli]), spread([c["run"] for c in cli]), spread([c["load"] for c in cli]),
                  spread([c["wall"] - c["run"] - c["load"] for c in cli])] if cli else ["–"] * 4
    result.add_row(str(size), spread([m["import"] for m in measured]),
                   *(spread([m["load"][s] for m in measured]) for s in STAGES), *end_to_end)
    return result


def main(n: Annotated[list[int] | None, typer.Option(help="captions from the source (repeatable)")] = None,
         reference_n: Annotated[list[int] | None, typer.Option(help="N at which one-at-a-time also runs")] = None,
         profile: Annotated[str, typer.Option(help="demo or paper")] = "demo",
         models: Annotated[Path | None, typer.Option(help="paper-shape folder (roberta-base, gpt2-large)")] = None,
         clm_dtype: Annotated[str | None, typer.Option(help="also run cfgen with the causal LM in this dtype "
                                                            "(e.g. bfloat16) at the smallest N")] = None,
         cli: Annotated[bool, typer.Option(help="also time `cfgen captions` at the smallest N")] = True,
         repeats: Repeats = 3,
         source: Path = COCO) -> None:
    with tempfile.TemporaryDirectory(prefix="cfgen-caption-bench-") as scratch:  # the demo's tiny models
        run_all(sorted(n or [100, 1000]), sorted(reference_n or [100]), profile, models, clm_dtype, cli, repeats,
                source, Path(scratch))


def run_all(sizes: list[int], reference: list[int], profile: str, models: Path | None, clm_dtype: str | None,
            cli: bool, repeats: int, source: Path, scratch: Path) -> None:
    overrides = [f"profile={profile}", *PAPER_METHOD, *model_overrides(profile, models, source, max(sizes), scratch)]
    methods = {"cfgen": ([], False), "one-at-a-time": ([], True)}
    if clm_dtype:
        methods[f"cfgen, CLM {clm_dtype}"] = ([f"perplexity.model.{profile}.dtype={clm_dtype}"], False)
    configs = {(size, method): partial(in_fresh_process, measure, source, size, overrides + extra, alone)
               for size in sizes for method, (extra, alone) in methods.items()
               if method == "cfgen" or size in reference and alone or size == sizes[0] and method.startswith("cfgen, ")}
    if cli:
        configs["cli"] = partial(in_fresh_process, cli_run, source, sizes[0], overrides)
    runs = alternating(configs, repeats)
    cli_runs = runs.pop("cli", None)
    title = f"caption stages (logic, models loaded), profile={profile}" + (f", models={models}" if models else "")
    console.print(stage_table(title, runs, repeats))
    console.print(fixed_table(sizes[0], runs[sizes[0], "cfgen"], cli_runs, repeats))


if __name__ == "__main__":
    start(main)
