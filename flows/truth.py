"""The truth flow: the toy world's checker over every generated sample and every selected pair of a demo run.

One cached Prefect task per caption pair re-renders its samples (with and without attention sharing) and reads them
back (`tasks.toyworld.truth.pair_truth`); its unit and content key are `truth.unit` and `truth.pair_content` (the
pair's captions and sample settings, the keyed generate params, the diffusion model's content and the code that
renders and checks). The selected pairs are read from their
exported PNGs. Outputs, published together like every stage's: `paths.truth_samples`, `paths.truth` (a row per
selected pair: the gallery's badge) and `paths.metrics/truth.json` (`tasks.toyworld.summary`). Disabled, it writes
empty frames and `{"enabled": false}`.
"""

from __future__ import annotations

from typing import cast

import polars as pl
from prefect import flow, get_run_logger
from prefect.futures import as_completed
from prefect.utilities.annotations import unmapped

from flows.engine.caching import in_store, unit_task
from flows.engine.console import show_json
from flows.engine.counters import write_metrics
from flows.engine.progress import StageProgress
from flows.preflight import check_models
from tasks.core import keys
from tasks.core.images import read_rgb, stored_files
from tasks.core.io import check_input, plain, read_frame
from tasks.core.loading import set_torch_threads
from tasks.core.schemas import JUDGED, SAMPLES, SELECTED, TRUTH, TRUTH_SAMPLES
from tasks.core.writing import write_frames
from tasks.image import backends
from tasks.image.params import GenerateParams
from tasks.image.thresholds import subjects_failure
from tasks.stages import Params, step
from tasks.toyworld import identity, summary, truth


@unit_task
def check_pair(pair: list[dict], params: GenerateParams, torch_threads: int | None, unit: keys.Unit,
               content: str) -> list[dict]:
    """`TRUTH_SAMPLES` rows of one pair's samples."""
    set_torch_threads(torch_threads)
    diffusion = backends.chosen(params).load(params)
    return truth.pair_truth(pl.DataFrame(pair, schema=SAMPLES), diffusion, params)


def subjects_pass(samples: pl.DataFrame, params: Params) -> pl.DataFrame:
    """(caption_id, sample, subjects_pass) of every sample the both-subjects check applies to (selection's rule)."""
    return samples.filter(pl.col("subject_margin_o").is_not_null()).select(
        "caption_id", "sample", subjects_pass=subjects_failure(params.selection).is_null())


@flow(name="truth")
def truth_flow(params: Params) -> dict:
    paths = params.paths
    if not params.truth.enabled:
        write_frames({paths.truth_samples: pl.DataFrame(schema=TRUTH_SAMPLES), paths.truth: pl.DataFrame(schema=TRUTH)})
        write_metrics({"stage": "truth", "enabled": False}, paths.metrics / "truth.json")
        return {"stage": "truth", "enabled": False}
    check(params)  # also here: the whole DAG runs no command's pre-flight
    samples = read_frame(paths.samples, SAMPLES, "generate")
    selected = read_frame(paths.selected, SELECTED, "selection")
    names = [*selected["image_o"], *selected["image_c"]]
    files = dict(zip(names, stored_files(params.root / paths.selected_images, names)))  # before any render
    pairs = samples.partition_by("caption_id", maintain_order=True)
    gp, unit = params.generate, truth.unit(params.generate)
    with StageProgress("truth", len(pairs), unit="pairs") as progress:
        futures = in_store(check_pair, params).map(
            pair=[p.to_dicts() for p in pairs], params=unmapped(gp), unit=unmapped(unit),
            torch_threads=unmapped(params.engine.torch_threads), content=[truth.pair_content(p) for p in pairs])
        for _ in as_completed(futures):
            progress.advance()
    checked = pl.DataFrame([row for f in futures for row in f.result()], schema=TRUTH_SAMPLES)
    chosen = truth.selected_truth(selected, lambda name: read_rgb(files[name]), TRUTH)
    judged = (read_frame(paths.judged, JUDGED, "judge").select("caption_id", "judge_pass").drop_nulls()
              if params.judge.enabled and paths.judged.is_file() else None)
    metrics = {"stage": "truth", "enabled": True,
               **summary.metrics(checked, chosen, subjects_pass(samples, params), judged, samples, params.selection),
               "pairs_checked": sum(f.state.name != "Cached" for f in futures)}
    write_frames({paths.truth_samples: checked, paths.truth: chosen})
    write_metrics(plain(metrics), paths.metrics / "truth.json")
    get_run_logger().info("truth: pair accuracy %s (samples) -> %s (selected)",
                          *(m["rate"] for m in metrics["pair_accuracy"].values()))
    return metrics


def check(params: Params) -> None:
    """When truth runs: the toy world's diffusion model is here and is the one its weights assemble into, and the
    samples were generated under the generate key truth renders with (`identity`)."""
    if params.truth.enabled:
        check_models(params.generate)
        check_input(params.paths.samples, SAMPLES, "generate")
        identity.check_world_model(params.generate, cast(str, params.tiny_models.toy_world))  # truth.enabled: set
        identity.check_samples(params.paths.samples, params.generate, step("generate").code)


def show(metrics: dict) -> None:
    show_json({key: value for key, value in metrics.items() if key != "by_edit_type"})
