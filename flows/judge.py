"""The judge flow: one cached Prefect task per selected pair asks the VLM its questions; the verdict is applied after
the cache, so a threshold change re-asks nothing; then the agreement with the people's labels, when there are any.

A pair's key hashes its two images' store paths (pixel hashes), the question texts it is asked, the keyed judge
params (the model spec), the model's content and the code that asks. Images are read inside the task from
absolute paths, so a Dask worker on another host asks as a local run does. Outputs: `paths.judged` (every pair's
four P(Yes) and verdict) with its rejects beside it, `paths.metrics/judge.json` (counters + calibration),
`paths.plots/judge_roc.{csv,png}`.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from prefect import flow, get_run_logger
from prefect.futures import as_completed
from prefect.utilities.annotations import unmapped

from flows.engine.caching import in_store, unit_task
from flows.engine.console import console
from flows.engine.counters import report_table, stage_metrics, write_metrics
from flows.engine.progress import StageProgress
from flows.validation import check_export, read_ratings
from tasks.core import keys
from tasks.core.fields import keyed_dump
from tasks.core.fingerprints import fingerprint
from tasks.core.images import read_rgb, stored_file
from tasks.core.io import check_input, plain, read_frame, write_outputs
from tasks.core.loading import set_torch_threads
from tasks.core.schemas import JUDGE_COLUMNS, JUDGED, JUDGED_REJECTS, PAIR, SELECTED
from tasks.judge import ask, calibration
from tasks.judge.params import JudgeParams
from tasks.judge.verdict import verdicts
from tasks.release import figures
from tasks.stages import Params
from tasks.validation import agreement

CODE = (ask.ask,)  # taken as declared: a patched name keys the same code


def judge_unit(params: JudgeParams) -> keys.Unit:
    """The keyed judge params but the templates (the texts a pair is asked count instead), the model, the code."""
    settings = {k: v for k, v in keyed_dump(params).items() if k != "templates"}
    return keys.unit("judge", CODE, settings, [params.model])


def pair_content(pair: dict, params: JudgeParams) -> str:
    """A pair's two images' store paths (pixel hashes) and the question texts it is asked."""
    return keys.digest(pair["image_o"], pair["image_c"], json.dumps(ask.questions(pair, params.templates)))


@unit_task
def ask_pair(pair: dict, images: dict[str, str], params: JudgeParams, torch_threads: int | None, unit: keys.Unit,
             content: str) -> dict[str, float | None]:
    """P(Yes) of each question about one pair; `images`: side -> absolute PNG path."""
    set_torch_threads(torch_threads)
    return ask.ask(pair, {side: read_rgb(Path(path)).copy() for side, path in images.items()}, params)  # writable


def asked(selected: pl.DataFrame, params: Params) -> tuple[pl.DataFrame, int]:
    """(caption_id + a `judge_<question>` column per question, pairs asked now rather than read from the cache)."""
    folder, jp = params.root / params.paths.selected_images, params.judge  # absolute: a worker has another cwd
    pairs = selected.to_dicts()
    images = [{side: str(stored_file(folder, p[f"image_{side}"])) for side in "oc"} for p in pairs]  # before any task
    with StageProgress("judge", len(pairs), unit="pairs") as progress:
        futures = in_store(ask_pair, params).map(
            pair=pairs, images=images,
            params=unmapped(jp), torch_threads=unmapped(params.engine.torch_threads), unit=unmapped(judge_unit(jp)),
            content=[pair_content(p, jp) for p in pairs])
        for _ in as_completed(futures):
            progress.advance()
    answers = [f.result() for f in futures]
    frame = pl.DataFrame({"caption_id": selected["caption_id"],
                          **{column: [a[column.removeprefix("judge_")] for a in answers] for column in JUDGE_COLUMNS}},
                         schema={"caption_id": pl.String, **dict.fromkeys(JUDGE_COLUMNS, pl.Float64)})
    return frame, sum(f.state.name != "Cached" for f in futures)


@flow(name="judge")
def judge_flow(params: Params) -> dict:
    """Every selected pair judged (or, disabled, listed with null answers); returns the metrics of judge.json."""
    paths, jp = params.paths, params.judge
    selected = read_frame(paths.selected, SELECTED, "selection")
    labels = agreement.image_labels(read_ratings(params))  # the people's majority label per image
    if jp.enabled:
        judged, computed = asked(selected, params)
        judged = verdicts(judged, jp.thresholds)
    else:
        judged, computed = pl.DataFrame({"caption_id": selected["caption_id"]}).with_columns(
            [pl.lit(None, JUDGED[name]).alias(name) for name in (*JUDGE_COLUMNS, "judge_pass", "judge_reason")]), 0
    people = calibration.human_pass(labels).rename({"human_pass": "people_pass"})
    judged = judged.join(people, on="caption_id", how="left").select(list(JUDGED))
    failed = selected.select(list(PAIR)).join(judged.filter(~pl.col("judge_pass")), on="caption_id")
    rejects = failed.select(*[pl.col(c) for c in JUDGED_REJECTS if c not in ("stage", "reason")],
                            stage=pl.lit("judge"), reason=pl.col("judge_reason"))
    write_outputs(judged, rejects, paths.judged)
    calibrated, roc = (calibration.calibrate(judged, labels, jp.thresholds) if jp.enabled
                       else ({}, pl.DataFrame(schema=calibration.ROC)))
    paths.plots.mkdir(parents=True, exist_ok=True)
    roc.write_csv(paths.plots / "judge_roc.csv")
    aucs = {q: m["auc"] for q, m in calibrated["questions"].items()} if calibrated else None
    figures.save(figures.roc_chart(roc, aucs), paths.plots / "judge_roc.png")
    metrics = {**stage_metrics("judge", selected.height, judged.filter(pl.col("judge_pass").fill_null(True)),
                               rejects, enabled=jp.enabled, pairs=selected.height, pairs_asked=computed,
                               pairs_cached=selected.height - computed if jp.enabled else 0),
               "model": fingerprint(jp.model) if jp.enabled else None, "agreement": calibrated,
               "thresholds": dict(jp.thresholds)}
    write_metrics(plain(metrics), paths.metrics / "judge.json")
    get_run_logger().info("judge: %d pairs (%d asked now), %d rejected", selected.height, computed, rejects.height)
    return metrics


def check(params: Params) -> None:
    """The selection is readable and the Label Studio export, when there is one, is of its images."""
    check_input(params.paths.selected, SELECTED, "selection")
    check_export(params)


def show(metrics: dict) -> None:
    report_table([{k: v for k, v in metrics.items() if k not in ("model", "agreement", "thresholds")}], None)
    if agreed := metrics["agreement"]:
        console.print(f"agreement with people on {agreed['pairs_compared']} pairs: accuracy {agreed['accuracy']}, "
                      f"Cohen's kappa {agreed['cohen_kappa']}")
