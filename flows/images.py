"""Image flows: screen many samples per caption pair, then select one canonically rendered winner per pair.

`generate_flow` maps one Prefect task per caption pair (key: the pair, its keyed params, n_samples, adaptive
settings, model contents, code); inside it every sample is looked up in Prefect's result store under its own
content key, so only never-seen samples are rendered. `filter_flow` ranks the passing samples of each pair from the
score table and renders candidates alone, in rounds (one per rank), as Prefect tasks keyed by sample content:
a threshold change renders only newly selected winners, and switching back renders nothing. The winners' PNGs are
written to the filter's own folder; no stage writes into another's outputs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
from prefect import flow, get_run_logger, task
from prefect.futures import as_completed
from prefect.results import ResultStore, get_result_store
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import unmapped

from flows.captions import stage_metrics
from flows.io import read_frame, write_outputs
from flows.progress import StageProgress
from flows.sharding import digest
from tasks import filter as clip_filter
from tasks import generate, image_store, render
from tasks.code import code_digest
from tasks.models import set_torch_threads
from tasks.params import FilterParams, GenerateParams, Params, keyed_dump
from tasks.sampling import Sample
from tasks.schemas import PAIR, SAMPLES, SELECTED, SELECTED_REJECTS


class ResultStoreCache:
    """`generate.SampleCache` over Prefect's result store; an unreadable (e.g. half-written) record is a miss."""

    def __init__(self, store: ResultStore) -> None:
        self.store = store

    def get(self, key: str) -> dict | None:
        try:
            return self.store.read(f"sample-{key}").result
        except Exception:  # missing or corrupt: either way the sample is rendered again
            return None

    def __setitem__(self, key: str, measured: dict) -> None:
        self.store.write(measured, key=f"sample-{key}")


def pair_key(pair: dict, params: GenerateParams, filter_params: FilterParams | None) -> str:
    """Everything that fixes a pair's rows: its sample keys' ingredients plus n_samples and the stopping rule."""
    rule = [params.n_samples, params.black_threshold, params.adaptive.model_dump(),
            keyed_dump(filter_params) if filter_params else None]
    return "generate-" + digest(json.dumps([pair[k] for k in PAIR]), render.identity(params), json.dumps(rule),
                                code_digest(generate.__name__))


@task(cache_key_fn=lambda context, parameters: parameters["key"], persist_result=True)
def generate_pair(pair: dict, params: GenerateParams, filter_params: FilterParams | None, key: str,
                  torch_threads: int | None, progress: StageProgress | None) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(score rows, rejects, samples rendered now) of one caption pair."""
    set_torch_threads(torch_threads)
    screening = generate.Screening(params, ResultStoreCache(get_result_store()), progress or (lambda n: None))
    kept, rejects = generate.run(pl.DataFrame([pair]), screening, filter_params)
    return kept, rejects, screening.rendered


@flow(name="generate", task_runner=ThreadPoolTaskRunner(max_workers=1))
def generate_flow(pairs_path: Path, output: Path, params: Params) -> dict:
    """A score row for every sample of every caption pair in `pairs_path`."""
    gen = params.generate
    filter_params = params.filter if gen.adaptive.enabled else None
    pairs = list(read_frame(pairs_path, PAIR, "perplexity").iter_rows(named=True))
    local = params.engine.dask_address is None  # a progress bar cannot travel to a Dask worker
    with StageProgress("generate", len(pairs) * gen.n_samples, unit="samples") as progress:
        futures = generate_pair.map(
            pair=pairs, key=[pair_key(p, gen, filter_params) for p in pairs], params=unmapped(gen),
            filter_params=unmapped(filter_params), torch_threads=unmapped(params.engine.torch_threads),
            progress=unmapped(progress if local else None))
        for future in as_completed(futures):
            if future.state.name == "Cached" or not local:
                progress.advance(gen.n_samples)
    results = [f.result() for f in futures]
    kept = pl.concat([r[0] for r in results]) if results else pl.DataFrame(schema=SAMPLES)
    rejects = pl.concat([r[1] for r in results]) if results else pl.DataFrame(schema=generate.REJECTS_SCHEMA)
    write_outputs(kept, rejects, output)
    computed = sum(f.state.name != "Cached" for f in futures)
    rendered = sum(r[2] for f, r in zip(futures, results) if f.state.name != "Cached")
    get_run_logger().info("generate: %d pairs (%d computed now), %d samples, %d rendered now", len(pairs), computed,
                          kept.height, rendered)
    return stage_metrics("generate", len(pairs), kept, rejects, pairs=len(pairs), pairs_generated=computed,
                         samples=kept.height, samples_rendered=rendered, unet_evals=int(kept["unet_evals"].sum()))


@task(cache_key_fn=lambda context, parameters: parameters["key"], persist_result=True)
def canonical_render(pair: dict, sample: Sample, params: GenerateParams, key: str, torch_threads: int | None) -> dict:
    """One sample rendered alone with its measurement (`render.canonical`); cached by content."""
    set_torch_threads(torch_threads)
    return render.canonical(pair, sample, params, render.load_models(params))


@flow(name="filter", task_runner=ThreadPoolTaskRunner(max_workers=1))
def filter_flow(scores_path: Path, output: Path, selected_images: Path, params: Params) -> dict:
    """One winner per caption pair, canonically rendered, its PNGs under `selected_images` (rewritten every run)."""
    scores = read_frame(scores_path, SAMPLES, "generate")
    queue = {cid: rows.to_dicts() for (cid,), rows in
             clip_filter.ranked(scores, params.filter).partition_by("caption_id", as_dict=True).items()}
    shutil.rmtree(selected_images, ignore_errors=True)
    selected, dropped, renders, cached = [], [], 0, 0
    with StageProgress("filter", len(queue), unit="pairs") as progress:
        for rank in range(max((len(q) for q in queue.values()), default=0)):
            batch = [rows[rank] for rows in queue.values() if len(rows) > rank]
            pairs = [{k: c[k] for k in PAIR} for c in batch]
            samples = [Sample(c["seed"], c["p2p_fraction"], c["guidance_scale"]) for c in batch]
            keys = [render.sample_key(p, s, params.generate) for p, s in zip(pairs, samples)]
            futures = canonical_render.map(pair=pairs, sample=samples, key=[f"canonical-{k}" for k in keys],
                                           params=unmapped(params.generate),
                                           torch_threads=unmapped(params.engine.torch_threads))
            for candidate, future in zip(batch, futures):
                result = future.result()
                cached += future.state.name == "Cached"
                renders += future.state.name != "Cached"
                reason = clip_filter.failure(result, params.filter, params.generate.black_threshold)
                if reason is not None:
                    dropped.append(clip_filter.fallthrough_row(candidate, reason))
                    continue
                paths = tuple(image_store.write_png(selected_images, image) for image in result["images"])
                selected.append(clip_filter.selected_row(candidate, result, rank + 1, paths))
                del queue[candidate["caption_id"]]
                progress.advance()
    kept = pl.DataFrame(selected, schema=SELECTED).sort("caption_id")
    rejects = pl.concat([pl.DataFrame(dropped, schema=SELECTED_REJECTS),  # queue: pairs whose candidates all failed
                         clip_filter.unselected(scores, kept["caption_id"].to_list(), list(queue))]
                        ).sort("caption_id", "sample", nulls_last=True)
    write_outputs(kept, rejects, output)
    pairs = scores["caption_id"].n_unique()
    evals = int(scores["unet_evals"].sum()) + 4 * params.generate.steps * (renders + cached)
    return stage_metrics("filter", pairs, kept, rejects, pairs=pairs, accepted=kept.height,
                         acceptance_rate=round(kept.height / pairs, 4) if pairs else 0.0, renders=renders,
                         renders_cached=cached, fallthrough=len(dropped),
                         unet_evals_per_accepted_pair=round(evals / kept.height, 1) if kept.height else None)
