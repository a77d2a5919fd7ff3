"""Image flows: screen many samples per caption pair, then select one canonically rendered winner per pair.

`generate_flow` maps one Prefect task per caption pair (key: the pair, its keyed params, n_samples, adaptive
settings, model contents, code); inside it every sample is looked up in Prefect's result store under its own
content key, so only never-seen samples are rendered. `selection_flow` runs `selection.run` with canonical renders
as Prefect tasks keyed by sample content: a threshold change renders only newly chosen winners, and switching back
renders nothing. The winners' PNGs are written to the selection stage's own folder; no stage writes into another's.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import polars as pl
from prefect import flow, get_run_logger, task
from prefect.futures import as_completed
from prefect.results import ResultStore, get_result_store
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import unmapped

from flows.progress import StageProgress
from flows.sharding import stage_metrics
from tasks.core.io import read_frame, write_outputs
from tasks.core.loading import set_torch_threads
from tasks.core.params import GenerateParams, Params, SelectionParams
from tasks.core.schemas import PAIR, SAMPLES
from tasks.image import generate, render, selection
from tasks.image.sampling import Sample


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


@task(cache_key_fn=lambda context, parameters: parameters["key"], persist_result=True)
def generate_pair(pair: dict, params: GenerateParams, selection_params: SelectionParams | None, key: str,
                  torch_threads: int | None, progress: StageProgress | None) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(score rows, rejects, samples rendered now) of one caption pair."""
    set_torch_threads(torch_threads)
    screening = generate.Screening(params, ResultStoreCache(get_result_store()), progress or (lambda n: None))
    kept, rejects = generate.run(pl.DataFrame([pair]), screening, selection_params)
    return kept, rejects, screening.rendered


@flow(name="generate", task_runner=ThreadPoolTaskRunner(max_workers=1))
def generate_flow(pairs_path: Path, output: Path, params: Params) -> dict:
    """A score row for every sample of every caption pair in `pairs_path`."""
    gen = params.generate
    selection_params = params.selection if gen.adaptive.enabled else None
    pairs = list(read_frame(pairs_path, PAIR, "perplexity").iter_rows(named=True))
    local = params.engine.dask_address is None  # a progress bar cannot travel to a Dask worker
    with StageProgress("generate", len(pairs) * gen.n_samples, unit="samples") as progress:
        futures = generate_pair.map(
            pair=pairs, key=[generate.pair_key(p, gen, selection_params) for p in pairs], params=unmapped(gen),
            selection_params=unmapped(selection_params), torch_threads=unmapped(params.engine.torch_threads),
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


@flow(name="selection", task_runner=ThreadPoolTaskRunner(max_workers=1))
def selection_flow(scores_path: Path, output: Path, selected_images: Path, params: Params) -> dict:
    """One winner per caption pair, canonically rendered, its PNGs under `selected_images` (rewritten every run)."""
    scores = read_frame(scores_path, SAMPLES, "generate")
    gen, states = params.generate, Counter()

    def render_canonical(pairs: list[dict], samples: list[Sample]) -> list[dict]:
        keys = [f"canonical-{render.sample_key(p, s, gen)}" for p, s in zip(pairs, samples)]
        futures = canonical_render.map(pair=pairs, sample=samples, key=keys, params=unmapped(gen),
                                       torch_threads=unmapped(params.engine.torch_threads))
        results = [f.result() for f in futures]
        states.update(f.state.name == "Cached" for f in futures)
        return results

    shutil.rmtree(selected_images, ignore_errors=True)
    contested = selection.ranked(scores, params.selection)["caption_id"].n_unique()
    with StageProgress("selection", contested, unit="pairs") as progress:
        kept, rejects, fallthrough = selection.run(scores, params.selection, gen.black_threshold, render_canonical,
                                                   selected_images, progress.advance)
    write_outputs(kept, rejects, output)
    pairs, renders, cached = scores["caption_id"].n_unique(), states[False], states[True]
    evals = int(scores["unet_evals"].sum()) + 4 * gen.steps * (renders + cached)
    return stage_metrics("selection", pairs, kept, rejects, pairs=pairs, accepted=kept.height,
                         acceptance_rate=round(kept.height / pairs, 4) if pairs else 0.0, renders=renders,
                         renders_cached=cached, fallthrough=fallthrough,
                         unet_evals_per_accepted_pair=round(evals / kept.height, 1) if kept.height else None)
