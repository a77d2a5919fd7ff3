"""Saliency-chosen edit sites (AutoCAD, Wen et al.): edit C_o where the image-text model looks when it matches I_o.

With s = cos(E_T(C_o), E_I(I_o)) of a CLIP-style bi-encoder, a token's saliency is ||ds / de|| over its token
embedding e (the gradient of s, hooked at the text model's token-embedding output), and an NLTK token's
(`tasks.text.tagging`) is the max over the sub-tokens whose character offsets overlap its span (0 if truncated away).
Words are the tokens with a letter or digit; the top k = max(1, ceil(top_share * words)) of them are salient (ties:
the earlier word).

Invariant: a site stays iff its caption has no real image (`image_path` null), or s < `min_score`, or a salient word
is its anchor (`position`) or lies inside its span (a counted phrase, a deleted phrase); the kept rows are the
input's, unchanged and in order, and every other site is a reject with reason `not_salient`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import torch
import torch.nn.functional as F
from PIL import Image

from tasks.core import schemas
from tasks.core.images import UnreadableImage, read_rgb
from tasks.core.loading import hub_kwargs, load_once, resolve_device
from tasks.core.specs import ItmSpec
from tasks.text.params import SaliencyParams
from tasks.text.tagging import tag_caption

if TYPE_CHECKING:
    from transformers import PreTrainedModel, ProcessorMixin

SCHEMA, REJECTS_SCHEMA = schemas.SITES, schemas.SITES_REJECTS


@dataclass(frozen=True)
class Models:
    processor: ProcessorMixin  # its tokenizer is a fast one: offsets map sub-tokens to characters
    model: PreTrainedModel
    device: torch.device


@load_once
def _load(spec: ItmSpec) -> Models:
    import transformers

    path, device = spec.local(), resolve_device(spec)
    processor = transformers.AutoProcessor.from_pretrained(path, **hub_kwargs(spec))
    model = getattr(transformers, spec.model_class).from_pretrained(path, **hub_kwargs(spec))
    return Models(processor, model.to(device).eval(), device)


def load_models(params: SaliencyParams) -> Models:
    return _load(params.model)


@torch.enable_grad()
def word_saliency(models: Models, image: np.ndarray, caption: str) -> tuple[float, list[float]]:
    """(s(I_o, C_o), the saliency of each NLTK token of C_o) for an HxWx3 uint8 image."""
    processor, model, device = models.processor, models.model, models.device
    text = processor.tokenizer(caption, return_tensors="pt", truncation=True, return_offsets_mapping=True)
    offsets = text.pop("offset_mapping")[0].tolist()
    with torch.no_grad():
        pixels = processor(images=Image.fromarray(image), return_tensors="pt").to(device)
        e_i = F.normalize(model.get_image_features(**pixels).pooler_output.float(), dim=-1)
    embedded = []

    def leaf(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        embedded.append(output.detach().requires_grad_())
        return embedded[-1]

    hook = model.text_model.embeddings.token_embedding.register_forward_hook(leaf)
    try:
        e_t = F.normalize(model.get_text_features(**text.to(device)).pooler_output.float(), dim=-1)
    finally:
        hook.remove()
    score = (e_t * e_i).sum()
    (grad,) = torch.autograd.grad(score, embedded[0])
    norms = grad[0].norm(dim=-1).tolist()
    return score.item(), [max((n for n, (a, b) in zip(norms, offsets) if a < t.end and t.start < b), default=0.0)
                          for t in tag_caption(caption)]


def salient_positions(saliencies: Sequence[float], tokens: Sequence[str], top_share: float) -> set[int]:
    """Positions of the top max(1, ceil(top_share * n)) of the n words (tokens with a letter or digit)."""
    words = [i for i, token in enumerate(tokens) if any(c.isalnum() for c in token)]
    k = max(1, math.ceil(round(top_share * len(words), 9)))  # round: 0.28 * 25 is 7.000000000000001
    return set(sorted(words, key=lambda i: (-saliencies[i], i))[:k])


def _salient(models: Models, caption: str, image_path: str | None, params: SaliencyParams) -> set[int] | None:
    """The salient positions of C_o, or None where every site stays (no I_o, or s below `min_score`)."""
    if image_path is None:
        return None
    score, saliencies = word_saliency(models, read_rgb(Path(image_path)), caption)
    words = [t.text for t in tag_caption(caption)]
    return None if score < params.min_score else salient_positions(saliencies, words, params.top_share)


def _touches(site: dict, salient: set[int] | None) -> bool:
    if salient is None or site["position"] in salient:
        return True
    return any(i in salient for i, t in enumerate(tag_caption(site["caption"]))
               if site["start"] <= t.start and t.end <= site["end"])


def run(sites: pl.DataFrame, params: SaliencyParams, models: Models) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept sites, rejects) for a `sites` frame with an `image_path` column (null: no real image); a caption whose
    image cannot be decoded is rejected whole with the image's reason (`images.UnreadableImage`)."""
    salient, unreadable = {}, {}
    for row in sites.unique("caption_id", keep="first", maintain_order=True).iter_rows(named=True):
        try:
            salient[row["caption_id"]] = _salient(models, row["caption"], row["image_path"], params)
        except UnreadableImage as err:
            unreadable[row["caption_id"]] = err.reason
    reasons = pl.Series([unreadable.get(site["caption_id"]) or
                         (None if _touches(site, salient[site["caption_id"]]) else "not_salient")
                         for site in sites.iter_rows(named=True)], dtype=pl.String)
    rejects = sites.with_columns(reason=reasons).filter(pl.col("reason").is_not_null())
    return sites.filter(reasons.is_null()).select(list(SCHEMA)), rejects.select(list(REJECTS_SCHEMA)).cast(
        REJECTS_SCHEMA)  # type: ignore[arg-type]  # polars: cast's Mapping keys are an invariant union
