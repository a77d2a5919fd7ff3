"""Image stage: `n_samples` seeds per caption pair, each rendered as (I_o, I_c), CLIP-scored, top-K stored.

Output: one score row per sample of every pair (SCHEMA), whether or not it was stored or rejected; seeds,
guidance scales and p2p fractions come from `sampling.plan_sample`. Samples are rendered `batch_samples` per UNet
call for scoring; the top_k_images by clip_dir (ties: lower sample index) are then re-rendered alone (the canonical
`sampling.render` of one; skipped when they were rendered alone already) and re-scored, so their rows describe exactly
the stored PNGs and `regenerate` reproduces them pixel for pixel. Rows of unstored samples carry batched-pass scores,
which may differ from a regenerated image's scores by float rounding. `unet_evals` counts the UNet batch rows spent
on a sample (4 per step and render). Models hold one P2P controller, so `run` calls in one process are serialised.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import torch

from tasks import filter as clip_filter
from tasks import image_store
from tasks.clip_scores import SCORE_COLUMNS, ClipScorer, load_clip, pair_scores
from tasks.params import FilterParams, GenerateParams
from tasks.sampling import (Diffusion, Prompts, Rendered, Sample, encode_prompts, load_diffusion, plan_sample,
                            render)

log = logging.getLogger(__name__)
_CONTROLLER_LOCK = threading.Lock()  # the loaded UNet's attention controller is per-process state
PAIR_COLUMNS = {"caption_id": pl.String, "image_id": pl.String, "caption": pl.String, "counterfactual": pl.String}
SCHEMA = {
    **PAIR_COLUMNS, "sample": pl.Int64, "seed": pl.Int64, "p2p_fraction": pl.Float64, "guidance_scale": pl.Float64,
    **{name: pl.Float64 for name in SCORE_COLUMNS}, "nan": pl.Boolean, "reject_reason": pl.String,
    "truncated_o": pl.Boolean, "truncated_c": pl.Boolean, "tokens_misaligned": pl.Boolean, "unet_evals": pl.Int64,
    "image_o": pl.String, "image_c": pl.String,
}
REJECTS_SCHEMA = {**PAIR_COLUMNS, "sample": pl.Int64, "seed": pl.Int64, "stage": pl.String, "reason": pl.String}


@dataclass(frozen=True)
class ImageModels:
    diffusion: Diffusion
    clip: ClipScorer


def load_models(params: GenerateParams) -> ImageModels:
    return ImageModels(load_diffusion(params.diffusion, params.vae), load_clip(params.clip))


@dataclass
class Batcher:
    """Renders samples `size` at a time; a CUDA OOM halves `size` for the rest of the run and retries."""

    size: int

    def render(self, models: ImageModels, prompts: Prompts, samples: list[Sample],
               params: GenerateParams) -> Iterator[tuple[list[Sample], Rendered]]:
        start = 0
        while start < len(samples):
            chunk = samples[start:start + self.size]
            try:
                rendered = render(models.diffusion, prompts, chunk, params.steps, params.size, params.p2p_mode)
            except torch.cuda.OutOfMemoryError:
                if self.size == 1:
                    raise
                self.size //= 2
                log.warning("CUDA out of memory: batch_samples halved to %d", self.size)
                torch.cuda.empty_cache()
                continue
            yield chunk, rendered
            start += len(chunk)


def image_reject_reason(images: np.ndarray, finite: bool, black_threshold: int) -> str | None:
    """`nan_image` (NaN/inf decoded), `black_image` (either image has every pixel <= black_threshold), or None."""
    if not finite:
        return "nan_image"
    return "black_image" if (images.reshape(2, -1).max(1) <= black_threshold).any() else None


def assess(base: dict, first: int, samples: list[Sample], rendered: Rendered, texts: torch.Tensor,
           models: ImageModels, params: GenerateParams) -> list[dict]:
    """Score rows for samples `first, first + 1, …`; NaN or black pairs are rejected, unscored and not embedded."""
    reasons = [image_reject_reason(images, finite, params.black_threshold)
               for images, finite in zip(rendered.images, rendered.finite)]
    ok = [i for i, reason in enumerate(reasons) if reason is None]
    scores = {name: [None] * len(samples) for name in SCORE_COLUMNS}
    if ok:
        embedded = models.clip.embed_images([rendered.images[i, b] for b in (0, 1) for i in ok],
                                            params.clip_batch_size).split(len(ok))
        for name, values in pair_scores(texts[:1], texts[1:], *embedded).items():
            for i, value in zip(ok, values):
                scores[name][i] = value
    return [{**base, "sample": first + i, "seed": s.seed, "p2p_fraction": s.p2p_fraction,
             "guidance_scale": s.guidance_scale, **{name: scores[name][i] for name in SCORE_COLUMNS},
             "nan": not bool(rendered.finite[i]), "reject_reason": reasons[i], "unet_evals": 4 * params.steps,
             "image_o": None, "image_c": None} for i, s in enumerate(samples)]


def top_k(rows: list[dict], k: int) -> list[int]:
    """Indices into `rows` of the k best unrejected samples by clip_dir (ties: lower sample index)."""
    ranked = sorted((i for i, r in enumerate(rows) if r["reject_reason"] is None and not math.isnan(r["clip_dir"])),
                    key=lambda i: (-rows[i]["clip_dir"], rows[i]["sample"]))
    return ranked[:k]


def store_paths(models: ImageModels, params: GenerateParams, row: dict) -> tuple[str, str]:
    diffusion = models.diffusion
    key = image_store.sample_key(
        dict(diffusion.fingerprints), row["caption"], row["counterfactual"], row["seed"], row["p2p_fraction"],
        row["guidance_scale"], params.steps, params.size, params.p2p_mode, diffusion.device.type,
        str(diffusion.dtype).removeprefix("torch."))
    return image_store.relative_paths(key)


def pair_rows(pair: dict, params: GenerateParams, models: ImageModels, image_root: Path,
              filter_params: FilterParams | None, batcher: Batcher) -> list[dict]:
    """Score rows of one pair's samples (fewer than n_samples when adaptive mode stops early), top-k stored."""
    prompts = encode_prompts(models.diffusion, pair["caption"], pair["counterfactual"])
    texts = models.clip.embed_texts([pair["caption"], pair["counterfactual"]])
    (count_o, count_c), (truncated_o, truncated_c) = prompts.token_counts, prompts.truncated
    base = {**{k: pair[k] for k in PAIR_COLUMNS}, "truncated_o": truncated_o, "truncated_c": truncated_c,
            "tokens_misaligned": count_o != count_c}
    adaptive = params.adaptive.enabled and filter_params is not None
    round_size = params.adaptive.round_samples if adaptive else params.n_samples
    rows, alone = [], {}  # alone: sample index -> its render in a batch of one (canonical); top-k candidates only
    for start in range(0, params.n_samples, round_size):
        samples = [plan_sample(params, pair["caption_id"], i)
                   for i in range(start, min(start + round_size, params.n_samples))]
        for chunk, rendered in batcher.render(models, prompts, samples, params):
            rows += assess(base, len(rows), chunk, rendered, texts, models, params)
            if len(chunk) == 1:
                alone[len(rows) - 1] = rendered
            best = set(top_k(rows, params.top_k_images))
            alone = {i: r for i, r in alone.items() if i in best}
        if adaptive and n_passing(rows, filter_params) >= params.adaptive.min_accepted:
            break
    for i in top_k(rows, params.top_k_images):
        rows[i] = store(base, rows[i], alone.get(i), prompts, texts, params, models, image_root)
    return rows


def n_passing(rows: list[dict], filter_params: FilterParams) -> int:
    return pl.DataFrame(rows, schema=SCHEMA).filter(clip_filter.passing(filter_params)).height


def store(base: dict, row: dict, rendered: Rendered | None, prompts: Prompts, texts: torch.Tensor,
          params: GenerateParams, models: ImageModels, image_root: Path) -> dict:
    """`row` re-assessed on its canonical render (done here unless given); its PNGs are written unless rejected."""
    sample = Sample(row["seed"], row["p2p_fraction"], row["guidance_scale"])
    evals = row["unet_evals"]
    if rendered is None:
        rendered = render(models.diffusion, prompts, [sample], params.steps, params.size, params.p2p_mode)
        evals += 4 * params.steps
    new = {**assess(base, row["sample"], [sample], rendered, texts, models, params)[0], "unet_evals": evals}
    if new["reject_reason"] is None:
        paths = store_paths(models, params, row)
        for relative, image in zip(paths, rendered.images[0]):
            image_store.write_png(image_root, relative, image)
        new["image_o"], new["image_c"] = paths
    return new


def regenerate(row: dict, params: GenerateParams, models: ImageModels, image_root: Path) -> tuple[Path, Path]:
    """Render a score row's sample alone (the canonical path) and store its PNGs; returns their absolute paths."""
    prompts = encode_prompts(models.diffusion, row["caption"], row["counterfactual"])
    sample = Sample(row["seed"], row["p2p_fraction"], row["guidance_scale"])
    rendered = render(models.diffusion, prompts, [sample], params.steps, params.size, params.p2p_mode)
    reason = image_reject_reason(rendered.images[0], rendered.finite[0], params.black_threshold)
    if reason is not None:
        raise RuntimeError(f"sample {row['sample']} of pair {row['caption_id']} regenerated as {reason}")
    paths = store_paths(models, params, row)
    return tuple(image_store.write_png(image_root, relative, image)
                 for relative, image in zip(paths, rendered.images[0]))


def run(pairs: pl.DataFrame, params: GenerateParams, models: ImageModels, image_root: Path,
        filter_params: FilterParams | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(score rows of every sample of every pair, rejected samples) for a `counterfactual_captions` frame.

    `filter_params` is only read in adaptive mode (without it adaptive mode is off: every pair gets n_samples).
    """
    if params.adaptive.enabled and filter_params is None:
        log.warning("adaptive over-generation needs filter_params: generating all %d samples", params.n_samples)
    batcher = Batcher(params.batch_samples)
    with _CONTROLLER_LOCK:
        rows = [row for pair in pairs.select(list(PAIR_COLUMNS)).iter_rows(named=True)
                for row in pair_rows(pair, params, models, Path(image_root), filter_params, batcher)]
    scores = pl.DataFrame(rows, schema=SCHEMA)
    rejects = (scores.filter(pl.col("reject_reason").is_not_null())
               .with_columns(stage=pl.lit("generate"), reason=pl.col("reject_reason")).select(list(REJECTS_SCHEMA)))
    return scores, rejects
