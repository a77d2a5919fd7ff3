"""Rendering and measuring one caption pair's samples: the part of the image stage both screening and selection run.

A sample's measurement is `{nan, max_pixel_o, max_pixel_c, <SCORE_COLUMNS>, <SUBJECT_COLUMNS>}` (scores None when a
decoded image had NaN/inf); black_threshold is applied to it afterwards (`reject_reason`), so it never enters a cache
key. `sample_key` hashes everything that fixes a sample's pixels and scores — C_o, C_c, the edit (type, original
word, substitute: the subject prompts), its seed, p2p fraction and guidance scale, and the sample unit
(`sample_unit`: keyed generate params, model contents, the diffusion and CLIP models' placement, the code a render
and its measurement execute with its libraries: the `code` entries the caller takes from the stage declaration and
the chosen backend's) —
and nothing else (no batch size, no n_samples). All but the sample's own values make the pair's `record_key`: the
samples of a pair share one record (`records.PairRecords`).
`canonical` renders one sample alone: the reproducible path whose pixels and scores are what the dataset exports.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

from tasks.core import keys
from tasks.core.edits import EDIT_TYPES, edited_word
from tasks.core.schemas import SCORE_COLUMNS, SUBJECT_COLUMNS
from tasks.core.specs import model_specs
from tasks.image import backends
from tasks.image.backends import Diffusion
from tasks.image.params import GenerateParams
from tasks.image.sampling import Rendered, Sample, render
from tasks.image.scoring import ClipScorer, load_clip, pair_scores

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImageModels:
    diffusion: Diffusion
    clip: ClipScorer


def load_models(params: GenerateParams) -> ImageModels:
    return ImageModels(backends.chosen(params).load(params), load_clip(params.clip))


def sample_unit(params: GenerateParams, code: tuple[str, ...]) -> keys.Unit:
    """What fixes a sample besides its own values, running `code` (the declaration's `"module:name"` entries) and
    the chosen backend's class (its `BackendNeeds.entry`: no other backend's code), imported here, so a stage imports
    its backend whether or not its cache held every sample; the VAE runs where the diffusion model does."""
    return keys.unit("generate", (*code, backends.chosen(params)), params, [spec for _, spec in model_specs(params)],
                     placed=(params.diffusion, params.clip))


def record_key(pair: dict, unit: keys.Unit) -> str:
    """The pair's sample record (`records.PairRecords`): C_o, C_c, the edit and the sample unit."""
    return unit.digest(json.dumps([pair["caption"], pair["counterfactual"], pair["edit_type"], pair["original_word"],
                                   pair["substitute"]]))


def sample_key(record: str, sample: Sample) -> str:
    """A sample of the pair whose `record_key` is `record`: that key + its seed, p2p fraction and guidance scale."""
    payload = json.dumps([record, sample.seed, repr(float(sample.p2p_fraction)),
                          repr(float(sample.guidance_scale))])
    return hashlib.blake2b(payload.encode(), digest_size=20).hexdigest()


@dataclass
class Batcher:
    """Renders samples `size` at a time (`prompts`: the backend's `encode`); a CUDA OOM halves `size` for every later
    call and retries. The first batch of a compiled UNet logs its wall time (compiling included: minutes at SD v1.5's
    size)."""

    size: int
    rendered: bool = False

    def render(self, diffusion: Diffusion, prompts: Any, samples: list[Sample],
               params: GenerateParams) -> Iterator[tuple[list[Sample], Rendered]]:
        start = 0
        while start < len(samples):
            chunk = samples[start:start + self.size]
            try:
                began = time.perf_counter()
                rendered = render(diffusion, prompts, chunk, params.steps, params.size)
                if not self.rendered and diffusion.compile_mode:
                    log.info("UNet compiled (torch.compile %s): first batch of %d sample(s) in %.1f s",
                             diffusion.compile_mode, len(chunk), time.perf_counter() - began)
                self.rendered = True
            except torch.cuda.OutOfMemoryError:
                if self.size == 1:
                    raise
                self.size //= 2
                log.warning("CUDA out of memory: batch_samples halved to %d", self.size)
                torch.cuda.empty_cache()
                continue
            yield chunk, rendered
            start += len(chunk)


@cache
def batcher(shared: str, batch_samples: int) -> Batcher:
    """One per process and sample unit (`Unit.shared`: models, size...): the largest batch that fits is found
    once, after at most log2(batch_samples) OOMs, and every later pair starts from it."""
    return Batcher(batch_samples)


def caption_texts(models: ImageModels, pair: dict, params: GenerateParams) -> torch.Tensor:
    """Unit embeddings of C_o, C_c and, for an edit type whose spans name what each image shows (`Edit.subjects`),
    the subject prompts of its original and substitute."""
    texts = [pair["caption"], pair["counterfactual"]]
    if EDIT_TYPES[pair["edit_type"]].subjects:
        texts += [params.subject_prompt.format(word=edited_word(pair[k], pair["edit_type"]))
                  for k in ("original_word", "substitute")]
    return models.clip.embed_texts(texts, params.clip_batch_size)


def measure(rendered: Rendered, texts: torch.Tensor, models: ImageModels, clip_batch_size: int) -> list[dict]:
    """One measurement per rendered sample; only finite pairs are embedded and scored. With subject prompts (texts
    2, 3) the margins are `subject_margin_o = s(I_o, original) - s(I_o, substitute)` and `subject_margin_c =
    s(I_c, substitute) - s(I_c, original)`, else null. Every score is a row's own sum (never a product over the
    chunk's rows, whose CPU kernels follow the row count: `tasks.core.batches`)."""
    ok = [i for i, finite in enumerate(rendered.finite) if finite]
    scores: dict[str, list[float | None]] = {name: [None] * len(rendered.finite)
                                             for name in (*SCORE_COLUMNS, *SUBJECT_COLUMNS)}
    if ok:
        image_o, image_c = models.clip.embed_images([rendered.images[i, b] for b in (0, 1) for i in ok],
                                                    clip_batch_size).split(len(ok))
        found = pair_scores(texts[:1], texts[1:2], image_o, image_c)
        if len(texts) == 4:
            original_minus_substitute = texts[2] - texts[3]
            found["subject_margin_o"] = (image_o * original_minus_substitute).sum(-1).tolist()
            found["subject_margin_c"] = (-(image_c * original_minus_substitute).sum(-1)).tolist()
        for name, values in found.items():
            for i, value in zip(ok, values):
                scores[name][i] = value
    max_pixel = rendered.images.reshape(len(rendered.finite), 2, -1).max(-1)
    return [{"nan": not bool(finite), "max_pixel_o": int(max_pixel[i, 0]), "max_pixel_c": int(max_pixel[i, 1]),
             **{name: values[i] for name, values in scores.items()}} for i, finite in enumerate(rendered.finite)]


def reject_reason(measured: dict, black_threshold: int) -> str | None:
    """`nan_image` (NaN/inf decoded), `black_image` (either image has every pixel <= black_threshold), or None."""
    if measured["nan"]:
        return "nan_image"
    return "black_image" if min(measured["max_pixel_o"], measured["max_pixel_c"]) <= black_threshold else None


def canonical(pair: dict, sample: Sample, params: GenerateParams, models: ImageModels) -> dict:
    """`sample` rendered alone: its measurement plus `images` (2, H, W, 3) uint8, I_o then I_c."""
    prompts = models.diffusion.encode(pair["caption"], pair["counterfactual"])
    rendered = render(models.diffusion, prompts, [sample], params.steps, params.size)
    measured = measure(rendered, caption_texts(models, pair, params), models, params.clip_batch_size)[0]
    return {**measured, "images": rendered.images[0]}


