"""The truth flow: the toy world's checker over every generated sample and every selected pair of a demo run.

One cached Prefect task per caption pair re-renders its samples (with and without attention sharing) and reads them
back (`tasks.toyworld.truth.pair_truth`); its key hashes the pair's captions and sample settings, the keyed generate
params, the diffusion model's content and the code that renders and checks. The selected pairs are read from their
exported PNGs. Outputs: `paths.truth_samples`, `paths.truth` (a row per selected pair: the gallery's badge) and
`paths.metrics/truth.json` (pair_accuracy, minimality, p2p_gain, filter_lift at its top level, per edit type, and
the both-subjects check's and the judge's agreement with truth). Disabled, it writes empty frames and
`{"enabled": false}`.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from prefect import flow, get_run_logger
from prefect.futures import as_completed
from prefect.utilities.annotations import unmapped

from flows.commands import PathsCommand, check_models, show_json
from flows.engine.caching import unit_task
from flows.engine.counters import write_metrics
from flows.engine.progress import StageProgress
from flows.engine.sharding import task_runner
from flows.engine.workspace import result_store
from tasks.core import keys
from tasks.core.images import read_rgb
from tasks.core.io import plain, read_frame
from tasks.core.loading import set_torch_threads
from tasks.core.schemas import SAMPLES, SELECTED
from tasks.image.params import GenerateParams
from tasks.image.sampling import load_diffusion
from tasks.params import Params
from tasks.toyworld import truth

CODE = (truth.pair_truth,)


def truth_unit(params: GenerateParams) -> keys.Unit:
    models = [spec for spec in (params.diffusion, params.vae) if spec is not None]
    return keys.unit("truth", CODE, params, models)


@unit_task
def check_pair(pair: list[dict], params: GenerateParams, torch_threads: int | None, unit: keys.Unit,
               content: str) -> list[dict]:
    """`truth.TRUTH` rows of one pair's samples."""
    set_torch_threads(torch_threads)
    diffusion = load_diffusion(params.diffusion, params.vae, params.channels_last, params.compile_unet)
    return truth.pair_truth(pl.DataFrame(pair, schema=SAMPLES), diffusion, params)


def pair_content(pair: pl.DataFrame) -> str:
    return keys.digest(json.dumps(pair.select("caption", "counterfactual", "edit_type", "sample", "seed",
                                              "p2p_fraction", "guidance_scale").rows()))


def subjects_pass(samples: pl.DataFrame, params: Params) -> pl.DataFrame:
    """(caption_id, sample, subjects_pass) of every sample the both-subjects check applies to (selection's rule: each
    margin above its threshold, a null threshold turning its side off)."""
    sp = params.selection
    checks = [pl.col(f"subject_margin_{side}") > bound for side, bound in (
        ("o", sp.min_subject_margin_o), ("c", sp.min_subject_margin_c)) if bound is not None]
    return samples.filter(pl.col("subject_margin_o").is_not_null()).select(
        "caption_id", "sample", subjects_pass=pl.all_horizontal(checks) if checks else pl.lit(True))


@flow(name="truth")
def truth_flow(params: Params) -> dict:
    paths = params.paths
    if not params.truth.enabled:
        write_metrics({"stage": "truth", "enabled": False}, paths.metrics / "truth.json")
        for path, schema in ((paths.truth_samples, truth.TRUTH), (paths.truth, truth.SELECTED_TRUTH)):
            path.parent.mkdir(parents=True, exist_ok=True)
            pl.DataFrame(schema=schema).write_parquet(path)
        return {"stage": "truth", "enabled": False}
    samples = read_frame(paths.samples, SAMPLES, "generate")
    selected = read_frame(paths.selected, SELECTED, "selection")
    pairs = samples.partition_by("caption_id", maintain_order=True)
    gp, unit = params.generate, truth_unit(params.generate)
    with StageProgress("truth", len(pairs), unit="pairs") as progress:
        futures = check_pair.with_options(result_storage=result_store(params)).map(
            pair=[p.to_dicts() for p in pairs], params=unmapped(gp), unit=unmapped(unit),
            torch_threads=unmapped(params.engine.torch_threads), content=[pair_content(p) for p in pairs])
        for _ in as_completed(futures):
            progress.advance()
    checked = pl.DataFrame([row for f in futures for row in f.result()], schema=truth.TRUTH)
    folder = params.root / paths.selected_images
    chosen = truth.selected_truth(selected, lambda name: read_rgb(Path(folder / name)))
    judged = (pl.read_parquet(paths.judged).select("caption_id", "judge_pass").drop_nulls()
              if params.judge.enabled and paths.judged.is_file() else None)
    metrics = {"stage": "truth", "enabled": True,
               **truth.metrics(checked, chosen, subjects_pass(samples, params), judged),
               "pairs_checked": sum(f.state.name != "Cached" for f in futures)}
    checked.write_parquet(paths.truth_samples)
    chosen.write_parquet(paths.truth)
    write_metrics(plain(metrics), paths.metrics / "truth.json")
    get_run_logger().info("truth: pair accuracy %s (samples) -> %s (selected)", *metrics["pair_accuracy"].values())
    return metrics


def _run(params: Params) -> dict:
    return truth_flow.with_options(task_runner=task_runner(params))(params)


COMMAND = PathsCommand(_run, "The toy world's truth of a demo run: every generated sample re-rendered (with and "
                       "without attention sharing) and every selected pair read back by the checker "
                       "(paths.metrics/truth.json: pair_accuracy, minimality, p2p_gain, filter_lift).",
                       lambda m: show_json({k: v for k, v in m.items() if k not in ("by_edit_type",)}),
                       lambda p: check_models(p.generate) if p.truth.enabled else None)
