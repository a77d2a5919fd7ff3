"""The judge's agreement on a run's pairs with simulated raters, through the judge stage's own calibration: a
stand-in for a Label Studio export when no one has annotated yet (the demo's committed export is empty).

    python benchmarks/judge_agreement.py                 # the last run's data/processed/judged.parquet
    python benchmarks/judge_agreement.py --raters 3 --seed 0

Every image of `paths.labelstudio_tasks` gets `--raters` seeded random choices (caption A, caption B, both, neither),
written as a Label Studio JSON export in a temporary folder and read back with `labelstudio.read_export`; then
`calibration.calibrate` scores the judged pairs against that majority, at the configured thresholds. Random raters
give κ near 0 by construction, and on the demo's tiny random VLM so does the judge: the table shows the machinery
and the figures' shape, not a judge's quality. Prints the agreement and per-question tables.
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from bench import ROOT, console, start, table

from tasks.config import load_params
from tasks.core.writing import json_text
from tasks.judge import calibration
from tasks.validation import agreement, labelstudio

CHOICES = ("caption A", "caption B", "both", "neither")


def simulated_export(tasks: list[dict], raters: int, seed: int) -> list[dict]:
    """The tasks as Label Studio exports them, each annotated by `raters` seeded random raters."""
    draw = random.Random(seed)
    return [{**task, "annotations": [
        {"result": [{"from_name": labelstudio.CHOICES_NAME, "to_name": "image", "type": "choices",
                     "value": {"choices": [draw.choice(CHOICES)]}}], "completed_by": rater, "was_cancelled": False}
        for rater in range(1, raters + 1)]} for task in tasks]


def main(raters: Annotated[int, typer.Option(min=1)] = 3, seed: int = 0) -> None:
    params = load_params(ROOT / "params.yaml")
    paths = params.paths
    tasks = json.loads((ROOT / paths.labelstudio_tasks).read_text())
    with tempfile.TemporaryDirectory() as folder:
        export = Path(folder) / "export.json"
        export.write_text(json_text(simulated_export(tasks, raters, seed)))
        labels = agreement.image_labels(labelstudio.read_export(export))
    judged = pl.read_parquet(ROOT / paths.judged)
    metrics, _ = calibration.calibrate(judged, labels, params.judge.thresholds)
    pairs = table(f"Judge vs {raters} simulated raters (majority), {judged.height} pairs", ("metric", "value"))
    for key in ("pairs_compared", "images_compared", "accuracy", "cohen_kappa", "reject_precision", "reject_recall",
                "kappa_at_best_thresholds"):
        pairs.add_row(key, str(metrics[key]))
    console.print(pairs)
    questions = table("Per question", ("question", "images", "AUC", "kappa", "threshold", "best threshold",
                                       "best kappa"))
    for name, m in metrics["questions"].items():
        questions.add_row(name, *(str(m[k]) for k in ("images", "auc", "kappa", "threshold", "best_threshold",
                                                      "best_kappa")))
    console.print(questions)


if __name__ == "__main__":
    start(main)
