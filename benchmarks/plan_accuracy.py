"""`cfgen plan` against the run it plans: its image-stage wall estimate vs `dvc repro` of generate and selection, and
its accepted pairs vs the pairs the run accepted.

    python benchmarks/plan_accuracy.py OUT                   # the demo profile, 3 timed repros

OUT/project is this checkout (tracked, and untracked but not ignored) as a fresh git + DVC repository. Under one
temporary Prefect server: `dvc repro perplexity` (the demo's models and the caption stages), then `cfgen plan` on the
demo captions (`--pass-rate`: no run has left a samples table yet, as before a first run), then `--repeats` times
`dvc repro --single-item --force` of generate and of selection, each after removing the sample records and canonical
renders so that every sample renders; then `cfgen plan` again, now with the run's samples table as its pilot (each
pair's own pass rate). The first table prints, per stage and in total, the plan's wall estimate, the measured wall
median (min–max) and the error of the estimate against the median; the second, the accepted pairs each plan
predicted against the run's `selected` rows. OUT/plan_accuracy.json keeps it all.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from bench import ROOT, Repeats, commit, console, copy_checkout, run, spread, start, table

from tasks.core.writing import json_text

SHARED = ROOT.parent / "shared"


def repro(project: Path, env: dict, *args: str) -> float:
    code, output, wall, _ = run(["dvc", "repro", *args], project, env)
    if code:
        raise SystemExit(f"dvc repro {' '.join(args)} failed:\n" + "\n".join(output.splitlines()[-30:]))
    return wall


def plan_report(project: Path, env: dict, output: str, *args: str) -> tuple[dict, float]:
    """(`cfgen plan`'s JSON report on the demo captions, its wall seconds)."""
    code, text, wall, _ = run(["cfgen", "plan", "data/raw/demo_captions.tsv", "--output", output, *args], project, env)
    if code:
        raise SystemExit("cfgen plan failed:\n" + "\n".join(text.splitlines()[-30:]))
    return json.loads((project / output).read_text()), wall


def main(out: Path, pass_rate: Annotated[float, typer.Option(help="the plan's --pass-rate")] = 0.5,
         repeats: Repeats = 3) -> None:
    """Plan the demo's image stages, run them, and compare (see the module docstring)."""
    from flows.engine.server import prefect_api
    from tasks.config import load_params

    out = out.resolve()
    project = commit(copy_checkout(out / "project"), "plan accuracy")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
           "NLTK_DATA": os.environ.get("NLTK_DATA", str(SHARED / "nltk_data")), "PYTHONPATH": str(project)}
    stages = ("generate", "selection")
    with prefect_api() as url:
        env["PREFECT_API_URL"] = url
        repro(project, env, "perplexity")
        plan, plan_wall = plan_report(project, env, "reports/plan.json", "--pass-rate", str(pass_rate))
        measured: dict[str, list[float]] = {name: [] for name in stages}
        for _ in range(repeats):
            for folder in ("samples", "canonical"):
                shutil.rmtree(project / ".prefect" / "storage" / folder, ignore_errors=True)
            for name in stages:
                measured[name].append(repro(project, env, "--single-item", "--force", name))
        pilot_plan, _ = plan_report(project, env, "reports/plan_pilot.json")
    params = load_params(project / "params.yaml")
    mode = "on" if params.generate.adaptive.enabled else "off"
    estimate = plan["estimates"][mode]
    m = plan["measured"]
    share = {name: m["startup_seconds"][name] + m["image_load_seconds"] for name in stages}
    fixed = sum(share.values())
    variable = estimate["image_wall_seconds"] - fixed
    compute = {"generate": estimate["samples"] * m["sample_seconds"],
               "selection": estimate["accepted"] * m["canonical_seconds"]}
    estimated = {name: share[name] + variable * compute[name] / max(sum(compute.values()), 1e-12) for name in stages}
    measured["image stages"] = [sum(runs) for runs in zip(*measured.values())]
    estimated["image stages"] = estimate["image_wall_seconds"]
    rows = {name: {"estimate_s": estimated[name], "measured_s": measured[name],
                   "error": estimated[name] / statistics.median(measured[name]) - 1} for name in measured}
    accepted_run = pl.read_parquet(project / params.paths.selected).height
    accepted = {f"--pass-rate {pass_rate:g}, every sample alike (binomial)": estimate["accepted"],
                f"pilot {pilot_plan['pass_rate_source']}, per pair": pilot_plan["estimates"][mode]["accepted"]}
    report = {"plan_wall_s": plan_wall, "pass_rate": pass_rate, "plan": plan, "stages": rows,
              "pilot_plan": pilot_plan, "accepted_run": accepted_run, "accepted_estimates": accepted}
    (out / "plan_accuracy.json").write_text(json_text(report, indent=1))
    shown = table(f"cfgen plan vs dvc repro, {plan['profile']} profile ({repeats} repros; the plan took "
                  f"{plan_wall:.0f} s)", ["stage", "estimate s", "measured s", "error"],
                  ["estimate: the plan's image-stage wall on 1 worker, split between the stages by their start-up, "
                   "model load and compute", "measured: `dvc repro --single-item --force STAGE` wall, every sample "
                   "rendered, median (min–max)", "error: estimate / median measured - 1"])
    for name, row in rows.items():
        shown.add_row(name, f"{row['estimate_s']:.1f}", spread(row["measured_s"], ".1f"), f"{row['error']:+.1%}")
    console.print(shown)
    shown = table(f"accepted pairs: cfgen plan vs the run ({accepted_run} accepted)",
                  ["pass rates from", "estimate", "run", "error"],
                  ["estimate: the plan's accepted pairs (adaptive " + mode + ")", "run: rows of `selected` after the "
                   "repros", "error: estimate / run - 1"])
    for name, value in accepted.items():
        shown.add_row(name, f"{value:.1f}", str(accepted_run), f"{value / accepted_run - 1:+.1%}")
    console.print(shown)


if __name__ == "__main__":
    start(main)
