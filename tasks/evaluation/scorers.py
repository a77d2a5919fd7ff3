"""Image-text matching scores s(C, I) of the evaluated models, as (texts × images) matrices or aligned pairs.

Bi-encoders (open_clip, Hugging Face CLIP-style models) embed each caption and image once: s = cosine × the model's
logit scale. Cross-encoders (ViLT, FLAVA, BridgeTower ITM heads) run once per (caption, image) pair: s = the
matching logit. Every scorer is loaded once per process (`load_once`) and runs in inference mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from tasks.core.fingerprints import resolve_path
from tasks.core.loading import hub_kwargs, load_once, resolve_device
from tasks.core.specs import ClipSpec, ItmSpec
from tasks.image.scoring import load_clip

Images = Sequence[np.ndarray]  # HxWx3 uint8


@dataclass(frozen=True)
class BiEncoder:
    """Unit embeddings in batches; scores are scaled cosines."""

    embed_texts: Callable[[list[str]], torch.Tensor]
    embed_images: Callable[[list[np.ndarray]], torch.Tensor]
    scale: float
    batch_size: int

    def _embed(self, embed: Callable, items: Sequence) -> torch.Tensor:
        return torch.cat([embed(list(items[i:i + self.batch_size])) for i in range(0, len(items), self.batch_size)])

    def matrix(self, texts: Sequence[str], images: Images) -> np.ndarray:
        return (self.scale * self._embed(self.embed_texts, texts) @ self._embed(self.embed_images, images).T).numpy()

    def pairs(self, texts: Sequence[str], images: Images) -> np.ndarray:
        embedded = self._embed(self.embed_texts, texts) * self._embed(self.embed_images, images)
        return (self.scale * embedded.sum(-1)).numpy()


@dataclass(frozen=True)
class CrossEncoder:
    """One forward pass per (caption, image) pair, `batch_size` pairs at a time."""

    score: Callable[[list[str], list[np.ndarray]], torch.Tensor]
    batch_size: int

    def pairs(self, texts: Sequence[str], images: Images) -> np.ndarray:
        out = [self.score(list(texts[i:i + self.batch_size]), list(images[i:i + self.batch_size]))
               for i in range(0, len(texts), self.batch_size)]
        return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.float32)

    def matrix(self, texts: Sequence[str], images: Images) -> np.ndarray:
        rows, columns = np.divmod(np.arange(len(texts) * len(images)), len(images))
        return self.pairs([texts[r] for r in rows], [images[c] for c in columns]).reshape(len(texts), len(images))


Scorer = BiEncoder | CrossEncoder


def load_scorer(spec: ClipSpec | ItmSpec, batch_size: int) -> Scorer:
    return _open_clip(spec, batch_size) if isinstance(spec, ClipSpec) else _hugging_face(spec, batch_size)


def _open_clip(spec: ClipSpec, batch_size: int) -> BiEncoder:
    clip = load_clip(spec)
    return BiEncoder(lambda texts: clip.embed_texts(texts).cpu(),
                     lambda images: clip.embed_images(images, batch_size).cpu(),
                     clip.model.logit_scale.detach().exp().item(), batch_size)


@load_once
def _load_hf(spec: ItmSpec) -> tuple:
    import transformers

    path, device = resolve_path(spec.id), resolve_device(spec)
    processor = transformers.AutoProcessor.from_pretrained(path, **hub_kwargs(spec))
    model = getattr(transformers, spec.model_class).from_pretrained(path, **hub_kwargs(spec))
    return processor, model.to(device).eval(), device


def _hugging_face(spec: ItmSpec, batch_size: int) -> Scorer:
    processor, model, device = _load_hf(spec)

    @torch.inference_mode()
    def run(texts: list[str] | None, images: list[np.ndarray] | None, call: Callable) -> torch.Tensor:
        inputs = processor(text=texts, images=[Image.fromarray(x) for x in images] if images else None,
                           return_tensors="pt", padding=True, truncation=True)
        return call(**inputs.to(device))

    if spec.index is None:
        def text(texts: list[str]) -> torch.Tensor:
            return F.normalize(run(texts, None, model.get_text_features).pooler_output.float(), dim=-1).cpu()

        def image(images: list[np.ndarray]) -> torch.Tensor:
            return F.normalize(run(None, images, model.get_image_features).pooler_output.float(), dim=-1).cpu()

        return BiEncoder(text, image, model.logit_scale.detach().exp().item(), batch_size)
    return CrossEncoder(lambda texts, images: getattr(run(texts, images, model), spec.logits)[:, spec.index]
                        .float().cpu(), batch_size)
