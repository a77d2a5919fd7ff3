"""Image stage, screening: `n_samples` seeds per caption pair rendered as (I_o, I_c) and CLIP-scored; no PNG kept.

Output: one row per sample of every pair (`schemas.SAMPLES`); seeds, guidance scales and p2p fractions come from
`sampling.plan_sample`, so sample i of a pair is the same whatever n_samples is. A sample is the unit of caching:
its measurement is looked up in the pair's record (`records`, under `render.record_key`) by `render.sample_key` and
rendered only when missing, `batch_samples` per UNet call, each batch appended to the record as it finishes. So
raising n_samples renders only the new samples, lowering it renders nothing, and a killed run loses only the batch
in flight. Batched kernels may round differently from a batch of one: these are screening scores, and selection
exports a canonical render.
`unet_evals` is the cost of a sample (the backend's `rows_per_sample` UNet rows per step) whether it was rendered now
or before.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol, cast

import polars as pl

from tasks.core import keys
from tasks.core.schemas import PAIR, SAMPLES, SAMPLES_REJECTS
from tasks.image import backends, render, thresholds
from tasks.image.params import GenerateParams, SelectionParams
from tasks.image.sampling import Sample, plan_sample

SCHEMA, REJECTS_SCHEMA = SAMPLES, SAMPLES_REJECTS
Progress = Callable[[int], None]


class SampleCache(Protocol):
    """Sample measurements per caption pair (`records.PairRecords` is one)."""

    def read(self, record: str) -> dict[str, dict]: ...

    def append(self, record: str, measured: dict[str, dict]) -> None: ...

    def locked(self, record: str) -> AbstractContextManager[None]: ...


@dataclass
class Screening:
    """One stage run: its params, sample cache, progress callback, models (loaded on the first render unless given,
    so a run whose samples are all cached loads none), sample unit (`render.sample_unit`, checked here: it refuses
    stale code), the samples rendered and the pairs that rendered any."""

    params: GenerateParams
    cache: SampleCache
    progress: Progress = lambda n: None
    models: render.ImageModels | None = None
    unit: keys.Unit = field(kw_only=True)
    rendered: int = 0
    rendered_pairs: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.unit.check()
        self.batcher = render.batcher(self.unit.shared, self.params.batch_samples)

    def measure(self, pair: dict, indices: range) -> list[dict]:
        """Measurements of samples `indices` of `pair`: from the cache, or rendered now and cached."""
        samples = [plan_sample(self.params, pair["caption_id"], i) for i in indices]
        record = render.record_key(pair, self.unit)
        keys = [render.sample_key(record, s) for s in samples]
        with self.cache.locked(record):
            found = self._render(pair, record, samples, keys)
        return [{"sample": index, "seed": s.seed, "p2p_fraction": s.p2p_fraction, "guidance_scale": s.guidance_scale,
                 **found[i]} for i, (index, s) in enumerate(zip(indices, samples))]

    def _render(self, pair: dict, record: str, samples: list[Sample], keys: list[str]) -> dict[int, dict]:
        """Each sample's measurement by position: from the pair's record, or rendered now and appended to it."""
        known = self.cache.read(record)
        found = {i: known.get(k) for i, k in enumerate(keys)}
        self.progress(sum(m is not None for m in found.values()))
        todo = [i for i, m in found.items() if m is None]
        if todo:
            models = self.models = self.models or render.load_models(self.params)
            prompts = models.diffusion.encode(pair["caption"], pair["counterfactual"])
            texts = render.caption_texts(models, pair, self.params)
            done = 0
            chunks = self.batcher.render(models.diffusion, prompts, [samples[i] for i in todo], self.params)
            for chunk, rendered in chunks:
                batch = todo[done:done + len(chunk)]
                for i, measured in zip(batch, render.measure(rendered, texts, models, self.params.clip_batch_size)):
                    found[i] = measured
                self.cache.append(record, {keys[i]: cast(dict, found[i]) for i in batch})
                self.rendered_pairs.add(pair["caption_id"])
                done += len(chunk)
                self.rendered += len(chunk)
                self.progress(len(chunk))
        return cast(dict[int, dict], found)  # every sample's, the missing ones rendered


def prompt_flags(params: GenerateParams, pair: dict) -> dict:
    """Whether C_o / C_c exceed the text encoder's limit (77 tokens for SD), and whether their token counts differ."""
    (count_o, count_c), (truncated_o, truncated_c) = backends.chosen(params).token_counts(
        params.diffusion, pair["caption"], pair["counterfactual"])
    return {"truncated_o": truncated_o, "truncated_c": truncated_c, "tokens_misaligned": count_o != count_c}


def pair_rows(pair: dict, screening: Screening, selection_params: SelectionParams | None) -> list[dict]:
    """Rows of one pair's samples: n_samples, or fewer when adaptive mode has enough passing samples."""
    params = screening.params
    adaptive = params.adaptive.enabled and selection_params is not None
    step = params.adaptive.round_samples if adaptive else params.n_samples
    base = {**{k: pair[k] for k in PAIR}, **prompt_flags(params, pair),
            "unet_evals": params.needs.rows_per_sample * params.steps}
    rows: list[dict] = []
    for start in range(0, params.n_samples, step):
        for measured in screening.measure(pair, range(start, min(start + step, params.n_samples))):
            rows.append({**base, **measured, "reject_reason": render.reject_reason(measured, params.black_threshold)})
        if adaptive and n_passing(rows, cast(SelectionParams, selection_params)) >= params.adaptive.min_accepted:
            break
    return rows


def n_passing(rows: list[dict], selection_params: SelectionParams) -> int:
    return pl.DataFrame(rows, schema=SCHEMA).filter(thresholds.passing(selection_params)).height


def run(pairs: pl.DataFrame, screening: Screening,
        selection_params: SelectionParams | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(a row per sample of every pair, rejected samples) for a `counterfactual_captions` frame.

    `selection_params` is only read in adaptive mode (without it every pair gets n_samples).
    """
    rows = [row for pair in pairs.select(list(PAIR)).iter_rows(named=True)
            for row in pair_rows(pair, screening, selection_params)]
    scores = pl.DataFrame(rows, schema=SCHEMA)
    rejects = (scores.filter(pl.col("reject_reason").is_not_null())
               .with_columns(stage=pl.lit("generate"), reason=pl.col("reject_reason")).select(list(REJECTS_SCHEMA)))
    return scores, rejects
