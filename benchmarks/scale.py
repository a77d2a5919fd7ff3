"""Scale rehearsal of the image stage's orchestration: what a sample costs beyond its model compute, what the store
and the Prefect database hold per pair, and what a rerun that renders nothing takes, at N caption pairs.

    python benchmarks/scale.py --pairs 200 --pairs 2000             # the code of this checkout
    python benchmarks/scale.py --pairs 200 --project /tmp/before    # the same runs on another checkout's code

Pairs: the first N shared COCO val2017 captions with a noun (NLTK's tagger), C_c = the first noun swapped for "cat"
("dog" when it is a cat). Models: the demo's tiny random SD and CLIP (32 px), `--steps` (1, the fewest the sampler
allows) and `--n-samples` per pair, CPU fp32, one torch thread. Each configuration runs `--repeats` times, each run
in a fresh process with a fresh Prefect home (database) and result store, under one temporary Prefect server, as
`cfgen generate` runs it:
- first run: `generate_flow` wall; model compute = time inside the model calls (loading, prompt encoding, sampling,
  CLIP measurement), timed by wrapping them; overhead = wall - compute, per sample; then `selection_flow` wall (the
  demo's thresholds; a canonical render per winner) and the pairs it accepted;
- store: files and bytes under the result store (sample records, canonical PNGs and any Prefect results) per pair,
  after both stages; the Prefect database's size;
- rerun: a second fresh process over the same store and database: both flows' walls (nothing renders);
- peak RSS of each process (the server is a process of its own and not counted).
Runs alternate between the N (N1 N2 N1 N2 ...). Medians with min–max over the repeats, and the growth of each median
from the smallest N to the largest with the min–max of the per-round growths; a legend under the table says what
each column measures.
`--report OUT/scale.json` prints a saved run's table again.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from itertools import count
from pathlib import Path
from typing import Annotated

import typer
from bench import Repeats, alternating, console, in_fresh_process, ratio, spread, start, table, time_inside

from tasks.core.writing import json_text

SHARED = Path(__file__).resolve().parents[2] / "shared"
SHARED_CAPTIONS = SHARED / "data" / "coco_val2017_captions.tsv"
os.environ.setdefault("NLTK_DATA", str(SHARED / "nltk_data"))


def make_pairs(n: int, out: Path) -> Path:
    """N caption pairs from the shared COCO captions, C_c = the first noun swapped (the PAIR schema)."""
    import polars as pl

    from tasks.core.schemas import PAIR
    from tasks.text.tagging import tag_caption

    rows = []
    for line in SHARED_CAPTIONS.read_text().splitlines()[1:]:
        caption_id, caption = line.split("\t", 1)
        token = next((t for t in tag_caption(caption) if t.tag == "NN"), None)
        if token is None:
            continue
        substitute = "dog" if token.text == "cat" else "cat"
        rows.append({"caption_id": caption_id, "image_id": caption_id, "caption": caption,
                     "counterfactual": caption[:token.start] + substitute + caption[token.end:],
                     "edit_type": "noun", "original_word": token.text, "substitute": substitute})
        if len(rows) == n:
            break
    path = out / f"pairs-{n}.parquet"
    pl.DataFrame(rows, schema=PAIR).write_parquet(path)
    return path


def run_generate(project: str, work: str, pairs: str, models: str, n_samples: int, steps: int) -> dict:
    """`generate_flow` then `selection_flow` in this (fresh) process with the checkout `project`'s code: walls,
    model compute, samples, accepted pairs, canonical renders and peak RSS."""
    os.environ.update(PREFECT_HOME=f"{work}/prefect-home", PREFECT_RESULTS_LOCAL_STORAGE_PATH=f"{work}/results",
                      PREFECT_LOGGING_LEVEL="WARNING", PREFECT_SERVER_ANALYTICS_ENABLED="false", TQDM_DISABLE="1")
    Path(work, "prefect-home").mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, project)
    import resource

    import torch

    from flows.engine.server import prefect_api
    from flows.image.generate import generate_flow
    from flows.image.selection import selection_flow
    from tasks.config import load_params
    from tasks.image import render
    from tasks.image.backends.sd1 import SD1

    torch.set_num_threads(1)
    spent = [0.0]
    for module, name in ((render, "load_models"), (render, "render"), (render, "measure"),
                         (render, "caption_texts"), (SD1, "encode")):
        time_inside(module, name, spent)
    params = load_params(Path(project) / "params.yaml", [
        f"generate.diffusion.id={models}/diffusion", "generate.vae=null", "generate.clip.id=cfgen-tiny-clip",
        f"generate.clip.pretrained={models}/clip/tiny_clip.safetensors",
        f"generate.clip.config={models}/clip/cfgen-tiny-clip.json", "generate.size=32", f"generate.steps={steps}",
        f"generate.n_samples={n_samples}", "generate.batch_samples=4", "engine.torch_threads=1"])
    with prefect_api():
        began = time.perf_counter()
        metrics = generate_flow(Path(pairs), Path(work) / "samples.parquet", params)
        wall, compute, spent[0] = time.perf_counter() - began, spent[0], 0.0
        began = time.perf_counter()
        selected = selection_flow(Path(work) / "samples.parquet", Path(work) / "selected.parquet",
                                  Path(work) / "images", params)
        selection_wall = time.perf_counter() - began
    return {"wall": wall, "compute": compute, "samples": metrics["samples"], "rendered": metrics["samples_rendered"],
            "selection_wall": selection_wall, "selection_compute": spent[0], "accepted": selected["accepted"],
            "canonical_renders": selected["renders"],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def store_size(work: Path) -> tuple[int, int, int]:
    """(files, bytes) under the result store, and the Prefect database's bytes."""
    files = [p for p in (work / "results").rglob("*") if p.is_file()]
    database = sum(p.stat().st_size for p in (work / "prefect-home").glob("prefect.db*"))
    return len(files), sum(p.stat().st_size for p in files), database


MEASURES = {  # column -> (its value in one run (the first and the no-op rerun of one fresh store) at N pairs, format)
    "wall s": (lambda r, n: r["first"]["wall"], ".2f"),
    "compute s": (lambda r, n: r["first"]["compute"], ".2f"),
    "overhead ms/sample": (lambda r, n: 1000 * (r["first"]["wall"] - r["first"]["compute"]) / r["first"]["samples"],
                           ".1f"),
    "selection s": (lambda r, n: r["first"]["selection_wall"], ".2f"),
    "accepted": (lambda r, n: r["first"]["accepted"], ".0f"),
    "store files/pair": (lambda r, n: r["files"] / n, ".2f"),
    "store KiB/pair": (lambda r, n: r["bytes"] / n / 1024, ".2f"),
    "Prefect DB MiB": (lambda r, n: r["database"] / 2**20, ".2f"),
    "peak RSS MiB": (lambda r, n: r["first"]["peak_rss_mib"], ".0f"),
    "no-op generate s": (lambda r, n: r["rerun"]["wall"], ".2f"),
    "no-op selection s": (lambda r, n: r["rerun"]["selection_wall"], ".2f"),
    "rerun peak RSS MiB": (lambda r, n: r["rerun"]["peak_rss_mib"], ".0f"),
}


LEGEND = (
    "Each run: a fresh result store and Prefect database; `generate_flow` then `selection_flow` in one fresh process "
    "(the first run), then both again in a second fresh process over the same store (the no-op rerun). Runs "
    "alternate between the N of the table (N1 N2 N1 N2 ...).",
    "wall s: `generate_flow`'s wall seconds in the first run's process, from its call to its return (the Prefect "
    "server already up), total over the N pairs; compute s: the seconds inside the model calls (loading, prompt "
    "encoding, sampling, CLIP measurement) of that same call; overhead ms/sample: (wall − compute) / samples of that "
    "same run, in milliseconds.",
    "selection s: `selection_flow`'s wall in that same process; accepted: the pairs it accepted.",
    "store files/pair, store KiB/pair: files and bytes under the result store after both stages, per pair; Prefect "
    "DB MiB: the database's size then.",
    "peak RSS MiB: the first run's process (the Prefect server is a process of its own, not counted); no-op generate "
    "s, no-op selection s, rerun peak RSS MiB: the same for the rerun's process, in which nothing renders.",
    "×k pairs: the ratio of the medians at the largest and the smallest N, then (min–max) of the ratios of the runs "
    "of each round (run i at the largest N over run i at the smallest).",
)


def report(saved: dict) -> None:
    """The table of a saved run: per N, each measure's median (min–max); then each median's growth, last N / first,
    with the range of the per-round growths."""
    config, results = saved["config"], {int(n): runs for n, runs in saved["results"].items()}
    result = table(f"image-stage orchestration ({config['project']}), n_samples {config['n_samples']}, steps "
                   f"{config['steps']}, median (min–max) of {config['repeats']} runs", ("pairs", *MEASURES), LEGEND)
    values = {n: {name: [measure(r, n) for r in runs] for name, (measure, _) in MEASURES.items()}
              for n, runs in results.items()}
    for n in results:
        result.add_row(str(n), *(spread(values[n][name], spec) for name, (_, spec) in MEASURES.items()))
    if len(results) > 1:
        first, last = min(results), max(results)
        result.add_row(f"×{last / first:g} pairs", *(ratio(values[last][name], values[first][name])
                                                     for name in MEASURES))
    console.print(result)


def scale_run(project: Path, root: Path, source: Path, models: Path, n_samples: int, steps: int,
              rounds: Iterator[int], n: int) -> dict:
    """One run at N = `n` pairs: the first run on a fresh store and database, its store size, and the no-op rerun,
    each `run_generate` in a fresh process."""
    repeat = next(rounds)
    work = root / f"run-{n}-{repeat}"
    shutil.rmtree(work, ignore_errors=True)  # a fresh store and database for every first run
    args = (str(project.resolve()), str(work), str(source), str(models), n_samples, steps)
    first = in_fresh_process(run_generate, *args)
    files, size, database = store_size(work)
    rerun = in_fresh_process(run_generate, *args)
    assert rerun["rendered"] == rerun["canonical_renders"] == 0, rerun
    result = {"first": first, "files": files, "bytes": size, "database": database, "rerun": rerun}
    console.print(f"N={n} run {repeat + 1}: {json.dumps(result)}")
    return result


def main(pairs: Annotated[list[int], typer.Option(help="caption pairs per configuration")] = [200, 2000],
         n_samples: Annotated[int, typer.Option(help="samples per pair")] = 16,
         steps: Annotated[int, typer.Option(help="sampler steps")] = 1,
         repeats: Repeats = 3,
         project: Annotated[Path, typer.Option(help="the checkout whose code runs")] = Path(__file__).parents[1],
         out: Annotated[Path | None, typer.Option(help="keep pairs, models and stores here")] = None,
         saved: Annotated[Path | None, typer.Option("--report", help="print a saved scale.json instead")] = None
         ) -> None:
    if saved:
        return report(json.loads(saved.read_text()))
    root = Path(out or tempfile.mkdtemp(prefix="cfgen-scale-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    from tasks.tiny.images import build_tiny_clip, build_tiny_diffusion

    models = root / "models"
    if not models.is_dir():
        build_tiny_diffusion(models / "diffusion", seed=0)
        build_tiny_clip(models / "clip", seed=0)
    results = alternating({n: partial(scale_run, project, root, make_pairs(n, root), models, n_samples, steps, count(),
                                      n) for n in pairs}, repeats)
    saved = {"config": {"project": str(project.resolve()), "n_samples": n_samples, "steps": steps,
                        "repeats": repeats}, "results": results}
    (root / "scale.json").write_text(json_text(saved, indent=1))
    report(saved)
    console.print(f"raw runs: {root / 'scale.json'}")


if __name__ == "__main__":
    start(main)
