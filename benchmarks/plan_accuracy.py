"""`cfgen plan` against the run it plans: its image-stage wall estimate vs `dvc repro` of generate and selection.

    python benchmarks/plan_accuracy.py OUT                   # the demo profile, 3 timed repros

OUT/project is this checkout (tracked, and untracked but not ignored) as a fresh git + DVC repository. Under one
temporary Prefect server: `dvc repro perplexity` (the demo's models and the caption stages), then `cfgen plan` on the
demo captions (`--pass-rate`: no run has left a samples table yet, as before a first run), then `--repeats` times
`dvc repro --single-item --force` of generate and of selection, each after removing the sample records and canonical
renders so that every sample renders. The table prints, per stage and in total, the plan's estimate, the measured
wall median (min–max) and the error of the estimate against the median; OUT/plan_accuracy.json keeps it all.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Annotated

import typer
from bench import ROOT, Repeats, commit, console, copy_checkout, run, spread, start, table

SHARED = ROOT.parent / "shared"


def repro(project: Path, env: dict, *args: str) -> float:
    code, output, wall, _ = run(["dvc", "repro", *args], project, env)
    if code:
        raise SystemExit(f"dvc repro {' '.join(args)} failed:\n" + "\n".join(output.splitlines()[-30:]))
    return wall


def main(out: Path, pass_rate: Annotated[float, typer.Option(help="the plan's --pass-rate")] = 0.5,
         repeats: Repeats = 3) -> None:
    """Plan the demo's image stages, run them, and compare (see the module docstring)."""
    from flows.engine.server import prefect_api

    out = out.resolve()
    project = commit(copy_checkout(out / "project"), "plan accuracy")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
           "NLTK_DATA": os.environ.get("NLTK_DATA", str(SHARED / "nltk_data")), "PYTHONPATH": str(project)}
    stages = ("generate", "selection")
    with prefect_api() as url:
        env["PREFECT_API_URL"] = url
        repro(project, env, "perplexity")
        code, output, plan_wall, _ = run(["cfgen", "plan", "data/raw/demo_captions.tsv", "--pass-rate",
                                          str(pass_rate)], project, env)
        if code:
            raise SystemExit("cfgen plan failed:\n" + "\n".join(output.splitlines()[-30:]))
        plan = json.loads((project / "reports" / "plan.json").read_text())
        measured: dict[str, list[float]] = {name: [] for name in stages}
        for _ in range(repeats):
            for folder in ("samples", "canonical"):
                shutil.rmtree(project / ".prefect" / "storage" / folder, ignore_errors=True)
            for name in stages:
                measured[name].append(repro(project, env, "--single-item", "--force", name))
    estimate = plan["estimates"]["on" if plan_adaptive(project) else "off"]
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
    report = {"plan_wall_s": plan_wall, "pass_rate": pass_rate, "plan": plan, "stages": rows}
    (out / "plan_accuracy.json").write_text(json.dumps(report, indent=1))
    shown = table(f"cfgen plan vs dvc repro, {plan['profile']} profile ({repeats} repros; the plan took "
                  f"{plan_wall:.0f} s)", ["stage", "estimate s", "measured s", "error"],
                  ["estimate: the plan's image-stage wall on 1 worker, split between the stages by their start-up, "
                   "model load and compute", "measured: `dvc repro --single-item --force STAGE` wall, every sample "
                   "rendered, median (min–max)", "error: estimate / median measured - 1"])
    for name, row in rows.items():
        shown.add_row(name, f"{row['estimate_s']:.1f}", spread(row["measured_s"], ".1f"), f"{row['error']:+.1%}")
    console.print(shown)


def plan_adaptive(project: Path) -> bool:
    from tasks.core.config import load_params

    return load_params(project / "params.yaml").generate.adaptive.enabled


if __name__ == "__main__":
    start(main)
