"""The generate flow: a score row for every sample of every caption pair.

It maps one Prefect task per run of about `generate.pairs_per_task` caption pairs (`chunks.sample_cut`: near-equal
sample counts, the heaviest first); the cache is each pair's sample record (`records.PairRecords`, beside Prefect's
results), so only never-seen samples are rendered, whichever task, process or host renders them.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import unmapped

from flows.engine.counters import stage_metrics
from flows.engine.progress import StageProgress
from flows.image import sample_records
from tasks.core import keys
from tasks.core.io import read_frame, write_outputs
from tasks.core.loading import set_torch_threads
from tasks.core.schemas import PAIR, SAMPLES
from tasks.image import chunks, generate, render
from tasks.image.params import GenerateParams, SelectionParams
from tasks.image.records import PairRecords
from tasks.stages import Params, step


@task(cache_policy=NO_CACHE, persist_result=False)
def generate_pairs(pairs: pl.DataFrame, params: GenerateParams, selection_params: SelectionParams | None,
                   records: PairRecords, unit: keys.Unit, torch_threads: int | None,
                   progress: StageProgress | None) -> tuple[pl.DataFrame, pl.DataFrame, int, int]:
    """(score rows, rejects, samples rendered now, pairs that rendered any) of a chunk of caption pairs."""
    set_torch_threads(torch_threads)
    screening = generate.Screening(params, records, progress or (lambda n: None), unit=unit)
    kept, rejects = generate.run(pairs, screening, selection_params)
    return kept, rejects, screening.rendered, len(screening.rendered_pairs)


@flow(name="generate", task_runner=ThreadPoolTaskRunner(max_workers=1))  # type: ignore[arg-type]  # prefect#16938
def generate_flow(pairs_path: Path, output: Path, params: Params) -> dict:
    """A score row for every sample of every caption pair in `pairs_path`, under the sample unit's key (recorded in
    the output: `io.made_by`, which truth checks)."""
    gen = params.generate
    unit = render.sample_unit(gen, step("generate").code)
    selection_params = params.selection if gen.adaptive.enabled else None
    pairs = read_frame(pairs_path, PAIR, "perplexity").select(list(PAIR))
    cut = chunks.sample_cut([gen.n_samples] * pairs.height, gen.pairs_per_task)
    local = params.engine.dask_address is None  # a progress bar cannot travel to a Dask worker
    with StageProgress("generate", pairs.height * gen.n_samples, unit="samples") as progress:
        futures = generate_pairs.map(
            pairs=[pairs.slice(run.start, len(run)) for run in cut], params=unmapped(gen),
            selection_params=unmapped(selection_params), records=unmapped(sample_records(params)),
            unit=unmapped(unit),
            torch_threads=unmapped(params.engine.torch_threads),
            progress=unmapped(progress if local else None))
        sizes = {f.task_run_id: len(run) for f, run in zip(futures, cut)}
        for future in as_completed(futures):
            if not local:
                progress.advance(sizes[future.task_run_id] * gen.n_samples)
    results = [futures[i].result() for i in sorted(range(len(cut)), key=lambda i: cut[i].start)]  # input order
    kept = pl.concat([r[0] for r in results]) if results else pl.DataFrame(schema=SAMPLES)
    rejects = pl.concat([r[1] for r in results]) if results else pl.DataFrame(schema=generate.REJECTS_SCHEMA)
    write_outputs(kept, rejects, output, unit.shared)
    rendered, computed = sum(r[2] for r in results), sum(r[3] for r in results)
    get_run_logger().info("generate: %d pairs (%d rendered now) in %d tasks, %d samples, %d rendered now",
                          pairs.height, computed, len(cut), kept.height, rendered)
    return stage_metrics("generate", pairs.height, kept, rejects, pairs=pairs.height, pairs_generated=computed,
                         samples=kept.height, samples_rendered=rendered, unet_evals=int(kept["unet_evals"].sum()))
