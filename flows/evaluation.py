"""The evaluate flow: one Prefect task per evaluated model, cached by content, so adding a model to
`evaluate.models` evaluates only that model and an unchanged rerun evaluates none; and, once the object-removal
strategy has made pairs, each model's ODmAP@k on them (its own task: a removal change never re-evaluates R@k).

A model's key (`tasks.core.keys`) hashes the pairs it scores (`pairs_content`, once per run, and `model_content`),
the keyed evaluate params its unit reads (R@k leaves the ODmAP settings out), the model's content (a cross-encoder's
also that of the bi-encoder whose top candidates it re-ranks) and the evaluation code (`model_unit`). Images are read
from disk a batch at a time, inside each model's task, each once per model; every file's existence is checked before
any model runs. Outputs: the Δ rows (`paths.evaluation`), `metrics.json` (dvc metrics) and `itm_deltas.png` under
`paths.evaluation_reports`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
from prefect import flow, get_run_logger

from flows.engine.caching import in_store, unit_task
from flows.engine.console import show_json
from flows.engine.sharding import LocalTaskRunner
from tasks.core import keys
from tasks.core.fields import keyed_dump
from tasks.core.fingerprints import content_hash
from tasks.core.images import source_image_paths, stored_files
from tasks.core.io import plain, read_frame
from tasks.core.loading import set_torch_threads
from tasks.core.schemas import EVALUATION, ITM_DELTAS, PAIR_IMAGES, REMOVAL_GALLERY, REMOVAL_PAIRS, VALIDATED
from tasks.core.specs import ClipSpec, ItmSpec
from tasks.core.writing import write_frame, write_json
from tasks.evaluation import evaluate as stage
from tasks.release import figures
from tasks.stages import Params

log = logging.getLogger(__name__)


ODMAP_SETTINGS = frozenset({"odmap_variant", "odmap_normalisation"})  # read by `od_map` alone
# taken as declared: a patched name keys the same code
CODE: dict[str, Callable[..., Any]] = {"evaluate": stage.evaluate, "od_map": stage.od_map}


def model_unit(name: str, entry: str, spec: ClipSpec | ItmSpec, params: Params) -> keys.Unit:
    """A model's scores: the keyed evaluate settings `entry` reads, its spec and content, and a re-ranking
    cross-encoder's bi-encoder's."""
    first = params.evaluate.first_stage(spec)
    settings = {k: v for k, v in keyed_dump(params.evaluate).items()
                if k != "models" and (entry == "od_map" or k not in ODMAP_SETTINGS)}
    specs = [spec, *([first] if first else [])]
    read = {"settings": settings, "models": [keyed_dump(s) for s in specs]}
    return keys.unit(name, [CODE[entry]], read, specs)


def pairs_content(selected: pl.DataFrame, real: list[str | None], validated: list[str] | None) -> str:
    """What every model scores: the pairs (captions and image store paths, which are pixel hashes), the real images'
    bytes and the validated subset; computed once per run (each real image hashed once), whatever the models."""
    pairs = selected.select("caption_id", "caption", "counterfactual", "image_o", "image_c").write_ndjson()
    return keys.digest(pairs, json.dumps([content_hash(Path(k)) if k else None for k in real]),
                       json.dumps(sorted(validated) if validated is not None else None))


def model_content(pairs: str, screening: bool) -> str:
    """`pairs_content` + whether the model is the one that screened the pairs."""
    return keys.digest(pairs, str(screening))


@unit_task
def evaluate_model(name: str, spec: ClipSpec | ItmSpec, selected: pl.DataFrame, real: list[str | None],
                   validated: list[str] | None, params: Params, unit: keys.Unit, content: str) -> tuple:
    set_torch_threads(params.engine.torch_threads)
    read = stage.reader(params.paths.selected_images)
    return stage.evaluate(name, spec, selected, read, real, validated, params.evaluate, params.generate.clip)


@unit_task
def odmap_model(spec: ClipSpec | ItmSpec, queries: pl.DataFrame, gallery: pl.DataFrame, params: Params,
                unit: keys.Unit, content: str) -> dict:
    set_torch_threads(params.engine.torch_threads)
    return stage.od_map(spec, queries, gallery, stage.reader(params.paths.inpainted_images), params.evaluate)


def removal_metrics(params: Params) -> dict[str, dict] | None:
    """ODmAP@k of every model on the object-removal pairs' test split (None before that strategy has run): per model
    `odmap` (the headline, under `evaluate.odmap_normalisation`) and `odmap_by_normalisation`; every query image is
    checked before the first model runs."""
    paths = params.paths
    if not paths.removal_pairs.is_file():
        return None
    queries = stage.removal_queries(read_frame(paths.removal_pairs, REMOVAL_PAIRS, "removal-selection"))
    gallery = read_frame(paths.removal_gallery, {c: REMOVAL_GALLERY[c] for c in ("caption", "classes")},
                         "removal-captions")
    stage.require_files(stored_files(paths.inpainted_images, queries["image_1"]))
    log.info("evaluate: ODmAP over %d test queries and %d gallery captions", queries.height, gallery.height)
    odmap = in_store(odmap_model, params)
    content = keys.digest(queries.write_ndjson(), gallery.write_ndjson())
    return {name: odmap(spec, queries, gallery, params, model_unit(f"odmap-{name}", "od_map", spec, params), content)
            for name, spec in params.evaluate.models.items()}


@flow(name="evaluate", task_runner=LocalTaskRunner())  # type: ignore[arg-type]  # prefect#16938
def evaluate_flow(params: Params) -> dict:
    """Every model of `evaluate.models` on the selected pairs; returns the metrics written to metrics.json. Its
    runner releases the models when the flow run ends."""
    paths = params.paths
    selected = read_frame(paths.selected, PAIR_IMAGES, "selection")
    real_paths = source_image_paths(selected["image_id"], paths.source_images, paths.source_image_name)
    real = stage.locate(selected, paths.selected_images, real_paths)
    validated = (read_frame(paths.validated, VALIDATED, "validation")["caption_id"].to_list()
                 if paths.validated.is_file() else None)
    odmap = removal_metrics(params)  # after the selected images' check, before any R@k model
    evaluate = in_store(evaluate_model, params)
    pairs = pairs_content(selected, real, validated)
    futures = {name: evaluate.submit(name, spec, selected, real, validated, params,
                                     model_unit(f"evaluate-{name}", "evaluate", spec, params),
                                     model_content(pairs, spec == params.generate.clip))
               for name, spec in params.evaluate.models.items()}
    results = {name: future.result() for name, future in futures.items()}
    metrics = {"models": {name: m for name, (m, _) in results.items()}, **stage.summary(selected, real, validated)}
    if odmap is not None:
        for name, values in odmap.items():
            metrics["models"][name].update(values)
    deltas = pl.concat([d for _, d in results.values()]) if results else pl.DataFrame(schema=EVALUATION)
    write_frame(deltas, paths.evaluation)
    write_json(plain(metrics), paths.evaluation_reports / "metrics.json")
    chart = {name: {d: frame[d].drop_nulls().to_numpy() for d in ITM_DELTAS}
             for (name,), frame in deltas.partition_by("model", as_dict=True, maintain_order=True).items()}
    figures.save(figures.deltas_chart(chart), paths.evaluation_reports / "itm_deltas.png")
    cached = sum(f.state.name == "Cached" for f in futures.values())
    get_run_logger().info("evaluate: %d models (%d from the cache) on %d pairs", len(futures), cached, selected.height)
    return metrics


def show(metrics: dict) -> None:
    show_json({name: model["all"] for name, model in metrics["models"].items()})
