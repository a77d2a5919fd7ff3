"""The selection flow: one winner per caption pair, canonically rendered.

It runs `selection.run` with canonical renders kept in the same pair records as generate's samples (their PNGs by
pixels beside them): a threshold change renders only newly chosen winners, and switching back renders nothing. The
winners' PNGs are written to the selection stage's own folder; no stage writes into another's. They are built beside
it and published with `selected.parquet` (`publish_folder`), so a run killed at any point leaves every PNG the
table in place names.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import unmapped

from flows.engine.counters import stage_metrics
from flows.engine.progress import StageProgress
from flows.image import sample_records
from tasks.core import keys
from tasks.core.images import read_rgb, stored_file
from tasks.core.io import read_frame, write_outputs
from tasks.core.loading import set_torch_threads
from tasks.core.publication import STORED_PNG, held_folder, publish_folder
from tasks.core.schemas import SAMPLES
from tasks.image import render, selection, store, thresholds
from tasks.image.params import GenerateParams
from tasks.image.records import PairRecords
from tasks.image.sampling import Sample
from tasks.stages import Params, step


def canonical_images(records: PairRecords) -> Path:
    """Where canonical renders' PNGs are kept, by pixels (`store`), beside the pair records."""
    return records.root.parent / "canonical"


def stored_canonical(records: PairRecords, record: str, key: str) -> dict | None:
    """A canonical render's measurement from its pair's record, while its PNGs are kept (else None); their names are
    stored names inside the canonical folder (`stored_file`)."""
    measured = records.read(record).get(key)
    folder = canonical_images(records)
    return measured if measured and all(stored_file(folder, png).is_file() for png in measured["pngs"]) else None


@task(cache_policy=NO_CACHE, persist_result=False)
def render_canonicals(jobs: list[tuple[dict, Sample]], params: GenerateParams, records: PairRecords,
                      unit: keys.Unit, torch_threads: int | None) -> list[tuple[dict, bool]]:
    """Each (pair, sample)'s canonical render (`render.canonical`: the sample alone) and whether it was rendered now:
    from the pair's record while its PNGs are kept, else rendered, its PNGs kept and its measurement, with their
    paths, appended to the record."""
    unit.check()
    set_torch_threads(torch_threads)
    models, found = None, []
    for pair, sample in jobs:
        record = render.record_key(pair, unit)
        key = f"canonical-{render.sample_key(record, sample)}"
        with records.locked(record):
            if measured := stored_canonical(records, record, key):
                found.append((measured, False))
                continue
            models = models or render.load_models(params)
            measured = render.canonical(pair, sample, params, models)
            measured["pngs"] = [store.write_png(canonical_images(records), image) for image in measured.pop("images")]
            records.append(record, {key: measured})
            found.append((measured, True))
    return found


@flow(name="selection", task_runner=ThreadPoolTaskRunner(max_workers=1))  # type: ignore[arg-type]  # prefect#16938
def selection_flow(scores_path: Path, output: Path, selected_images: Path, params: Params) -> dict:
    """One winner per caption pair, canonically rendered, its PNGs under `selected_images` (exactly those, published
    with the table)."""
    scores = read_frame(scores_path, SAMPLES, "generate")
    gen, records = params.generate, sample_records(params)
    counts: Counter[str] = Counter()
    unit = render.sample_unit(gen, step("generate").code)
    folder = canonical_images(records)

    def render_canonical(pairs: list[dict], samples: list[Sample]) -> list[dict]:
        """Canonical renders, from the pair records or rendered, in chunks of `pairs_per_task`."""
        jobs = list(zip(pairs, samples))
        found = [result for future in render_canonicals.map(
            jobs=[jobs[i:i + gen.pairs_per_task] for i in range(0, len(jobs), gen.pairs_per_task)],
            params=unmapped(gen), records=unmapped(records), unit=unmapped(unit),
            torch_threads=unmapped(params.engine.torch_threads)) for result in future.result()]
        counts.update(rendered=sum(now for _, now in found), cached=sum(not now for _, now in found))
        return [{**m, "images": np.stack([read_rgb(stored_file(folder, png)) for png in m["pngs"]])} for m, _ in found]

    contested = thresholds.ranked(scores, params.selection)["caption_id"].n_unique()
    with held_folder(selected_images, output, STORED_PNG) as staged, \
            StageProgress("selection", contested, unit="pairs") as progress:
        kept, rejects, fallthrough = selection.run(scores, params.selection, gen.black_threshold, render_canonical,
                                                   staged, progress.advance)
        publish_folder(staged, selected_images, lambda: write_outputs(kept, rejects, output), STORED_PNG)
    pairs, renders, cached = scores["caption_id"].n_unique(), counts["rendered"], counts["cached"]
    evals = int(scores["unet_evals"].sum()) + gen.needs.rows_per_sample * gen.steps * (renders + cached)
    return stage_metrics("selection", pairs, kept, rejects, pairs=pairs, accepted=kept.height,
                         acceptance_rate=round(kept.height / pairs, 4) if pairs else 0.0, renders=renders,
                         renders_cached=cached, fallthrough=fallthrough,
                         unet_evals_per_accepted_pair=round(evals / kept.height, 1) if kept.height else None)
