"""Image flows: over-generate scored (I_o, I_c) samples per caption pair, then filter and select.

`generate_flow` maps one Prefect task per caption pair (a pair is the unit of caching: a rerun generates only pairs
never generated with these params, models and code), on the local runner or a Dask cluster. `filter_flow` reads
the score table only, so a threshold change never regenerates; a winner without a stored PNG is re-rendered from
its (seed, p2p_fraction, guidance_scale), pixel-identical on the same device. Selected images are copied into the
filter's own folder, so the dataset never points into the generation store.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import polars as pl
from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner

from flows.captions import stage_metrics
from flows.io import read_frame, write_outputs
from flows.sharding import run_sharded
from tasks import filter as clip_filter
from tasks import generate
from tasks.models import set_torch_threads
from tasks.params import EngineParams, FilterParams, GenerateParams, load_section

PER_PAIR = 1  # shard size: every caption pair is its own cached task


def images_missing(root: Path):
    """True when a score table names a stored PNG that is not under `root` (then the pair is generated again)."""
    def missing(scores: pl.DataFrame) -> bool:
        stored = scores.select(pl.concat_list("image_o", "image_c").explode().drop_nulls()).to_series()
        return any(not (root / path).exists() for path in stored)
    return missing


@flow(name="generate", task_runner=ThreadPoolTaskRunner(max_workers=1))
def generate_flow(pairs_path: Path, output: Path, image_root: Path, raw: dict[str, Any]) -> dict:
    """Score rows for every sample of every caption pair in `pairs_path`; top-K PNGs under `image_root`."""
    params = load_section(GenerateParams, "generate", raw)
    filter_params = load_section(FilterParams, "filter", raw) if params.adaptive.enabled else None
    pairs = read_frame(pairs_path, generate.PAIR_COLUMNS, "perplexity")
    engine = load_section(EngineParams, "engine", raw)
    result = run_sharded("generate", "tasks.generate", pairs, params, engine, PER_PAIR,
                         kwargs={"image_root": Path(image_root), "filter_params": filter_params},
                         keyed=filter_params, recompute=images_missing(Path(image_root)))
    write_outputs(result.kept, result.rejects, output)
    unet_evals = int(result.kept["unet_evals"].sum())
    metrics = stage_metrics("generate", pairs.height, result.kept, result.rejects, pairs=result.shards,
                            pairs_generated=result.shards_computed, samples=result.kept.height,
                            unet_evals=unet_evals)
    get_run_logger().info("generate: %d pairs, %d generated now, %d samples", result.shards,
                          result.shards_computed, result.kept.height)
    return metrics


def copy_selected(selected: pl.DataFrame, image_root: Path, target: Path) -> None:
    """Copy the winners' PNGs into `target` under the same relative paths (a fresh folder every run)."""
    shutil.rmtree(target, ignore_errors=True)
    for relative in selected.select(pl.concat_list("image_o", "image_c").explode()).to_series():
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(image_root / relative, target / relative)


def regenerate_missing(selected: pl.DataFrame, raw: dict[str, Any], image_root: Path) -> pl.DataFrame:
    """Winners whose PNGs were never stored, re-rendered into `image_root`; their paths filled in."""
    missing = selected.filter("needs_regeneration")
    if missing.is_empty():
        return selected
    params = load_section(GenerateParams, "generate", raw)
    set_torch_threads(load_section(EngineParams, "engine", raw).torch_threads)  # as the shard tasks did
    models = generate.load_models(params)
    rows = []
    for row in missing.iter_rows(named=True):
        path_o, path_c = generate.regenerate(row, params, models, image_root)
        rows.append({"caption_id": row["caption_id"], "image_o": path_o.relative_to(image_root).as_posix(),
                     "image_c": path_c.relative_to(image_root).as_posix()})
    return selected.update(pl.DataFrame(rows), on="caption_id")


@flow(name="filter")
def filter_flow(scores_path: Path, output: Path, image_root: Path, selected_images: Path,
                raw: dict[str, Any]) -> dict:
    """Thresholds + selection on the score table; winners' images copied to `selected_images`."""
    params = load_section(FilterParams, "filter", raw)
    scores = read_frame(scores_path, generate.SCHEMA, "images")
    selected, rejects = clip_filter.run(scores, params)
    selected = regenerate_missing(selected, raw, Path(image_root))
    copy_selected(selected, Path(image_root), Path(selected_images))
    write_outputs(selected, rejects, output)
    pairs, accepted = scores["caption_id"].n_unique(), selected.height
    evals = int(scores["unet_evals"].sum())
    return stage_metrics("filter", pairs, selected, rejects, pairs=pairs, accepted=accepted,
                         acceptance_rate=round(accepted / pairs, 4) if pairs else 0.0,
                         regenerated=int(selected["needs_regeneration"].sum()),
                         unet_evals_per_accepted_pair=round(evals / accepted, 1) if accepted else None)
