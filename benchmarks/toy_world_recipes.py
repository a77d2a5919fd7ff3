"""Toy-world recipes side by side: how often each weights folder's diffusion model draws what its caption says, on the
same fixed scenes and seeds, with Wilson 95% intervals, by scene kind and by GenEval family.

    python benchmarks/toy_world_recipes.py tasks/toyworld/weights RUN_FOLDER ... [--spacing leading --spacing trailing]

Each folder is a `cfgen toy-world train` output (its `train.json` says the recipe and the samples it saw). Scenes are
drawn from their own seed (`SCENES`: no training stream's and not the trainer's read-out's); scene i is drawn from
seeds i, i + scenes, ... (`accuracy.readout`), by the pipeline's SD v1 sampler as the demo runs it (Euler-ancestral,
no attention sharing), at `--steps` and `--guidance` (the demo's: 10 and 3.5), under each `--spacing` (default: the
folder's own), and read back by the project's checker.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from bench import console, start, table

from tasks.core.specs import ModelSpec
from tasks.image.backends.sd1 import load_diffusion
from tasks.toyworld import models
from tasks.toyworld.accuracy import SCENE_KINDS, readout, scene_kind
from tasks.toyworld.assemble import assemble
from tasks.toyworld.params import Schedule
from tasks.toyworld.stats import rate
from tasks.toyworld.summary import FAMILIES

SCENES = "recipes"  # the fixed scenes' seed


def cell(values: list[bool]) -> str:
    r = rate(pl.Series(values, dtype=pl.Boolean))
    return "–" if r["rate"] is None else f"{r['rate']:.3f} ({r['ci95'][0]:.2f}–{r['ci95'][1]:.2f}) n={r['of']}"


def samples_seen(record: dict) -> str:
    schedule = Schedule.from_record(record["schedule"])
    return f"{schedule.diffusion_steps * schedule.batch / 1000:.0f} k"


def main(weights: list[Path], scenes: int = 256, seeds: int = 2, steps: int = 10, guidance: float = 3.5,
         spacing: Annotated[list[str] | None, typer.Option(help="leading or trailing (repeatable; default: the "
                                                                "folder's own)")] = None) -> None:
    kinds = table(f"Toy world, per image: {scenes} fixed scenes × {seeds} seeds, {steps} steps, guidance {guidance}",
                  ["weights", "samples", "spacing", "all", *SCENE_KINDS, "s"],
                  ["rate (Wilson 95% interval) n=images; scenes from seed 'recipes', the same for every row"])
    families = table("The same images by GenEval family (an image counts in each family its caption belongs to)",
                     ["weights", "spacing", *FAMILIES])
    for folder in weights:
        record = json.loads((folder / "train.json").read_text())
        with tempfile.TemporaryDirectory() as assembled:
            assemble(folder, Path(assembled))
            diffusion = load_diffusion(ModelSpec(id=str(Path(assembled) / "diffusion"), device="cpu"), None)
        for space in spacing or [Schedule.from_record(record["schedule"]).spacing]:
            started = time.perf_counter()
            shown = readout(replace(diffusion, scheduler=models.scheduler(space)), scenes, steps, guidance, seeds,
                            SCENES)
            by_kind = {kind: [ok for spec, ok in shown if scene_kind(spec) == kind] for kind in SCENE_KINDS}
            kinds.add_row(str(folder), samples_seen(record), space, cell([ok for _, ok in shown]),
                          *(cell(v) for v in by_kind.values()), f"{time.perf_counter() - started:.0f}")
            families.add_row(str(folder), space, *(cell([ok for spec, ok in shown if test(spec)])
                                                   for test in FAMILIES.values()))
    console.print(kinds)
    console.print(families)


if __name__ == "__main__":
    start(main)
