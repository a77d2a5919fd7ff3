"""Image-text matching scores s(C, I) of the evaluated models, over captions and lazily read images (`Images`).

Bi-encoders (open_clip, Hugging Face CLIP-style models) embed each unique caption and image once (`BiEncoder.embed`,
N × d in memory): s = cosine × the model's logit scale, for aligned pairs or blocks of query rows. Cross-encoders
(ViLT, FLAVA, BridgeTower ITM heads) run once per (caption, image) pair, alone, in image order, reading each image
once: s = the matching logit. A run that asks a cross-encoder several times records what it asks first
(`Asked`), then scores every pair in one call (`Scored`), so each image is read once per model. Every scorer is
loaded once per process (`load_once`) and runs in inference mode.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from tasks.core.batches import invariant_map, invariant_products
from tasks.core.loading import hub_kwargs, load_once, resolve_device
from tasks.core.specs import ClipSpec, ItmSpec
from tasks.image.scoring import load_clip, stacked

Reader = Callable[[str], np.ndarray]  # image key -> HxWx3 uint8 pixels
SEEDED = threading.Lock()  # held by a seeded forward pass (`_hugging_face`)


@dataclass(frozen=True)
class Images:
    """Images by key (equal keys: equal pixels), read by `read` only when indexed; a slice reads each distinct key
    of its batch once and keeps nothing, so a scorer holds at most one batch of pixels."""

    keys: tuple[str, ...]
    read: Reader

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, at: slice) -> list[np.ndarray]:
        pixels = {key: self.read(key) for key in dict.fromkeys(self.keys[at])}
        return [pixels[key] for key in self.keys[at]]

    def take(self, indices: Iterable[int]) -> Images:
        return Images(tuple(self.keys[i] for i in indices), self.read)


@dataclass(frozen=True)
class Embedded:
    """A bi-encoder's unit embeddings (N × d) of fixed captions and image keys; scores are scaled cosines."""

    texts: dict[str, int]
    text_vectors: torch.Tensor
    images: dict[str, int]
    image_vectors: torch.Tensor
    scale: float

    def pairs(self, texts: Sequence[str], images: Images) -> np.ndarray:
        embedded = self._texts(texts) * self._images(images.keys)
        return (self.scale * embedded.sum(-1)).numpy()

    def rows(self, texts: Sequence[str], image_keys: Sequence[str],
             by_caption: bool) -> Callable[[np.ndarray], np.ndarray]:
        """Score rows by query index: (captions × images) when `by_caption`, else (images × captions)."""
        scaled, images = self.scale * self._texts(texts), self._images(image_keys)
        queries, candidates = (scaled, images) if by_caption else (images, scaled)
        def scores(at: np.ndarray) -> np.ndarray:
            with invariant_products():  # a query's row, whichever block it falls in
                return (queries[torch.from_numpy(at)] @ candidates.T).numpy()
        return scores

    def _texts(self, texts: Sequence[str]) -> torch.Tensor:
        return self.text_vectors[[self.texts[t] for t in texts]]

    def _images(self, keys: Sequence[str]) -> torch.Tensor:
        return self.image_vectors[[self.images[k] for k in keys]]


@dataclass(frozen=True)
class BiEncoder:
    """Unit embeddings, each the same in any batch (`invariant_map`: texts batched by token count, images `batch_size`
    at a time, read per batch); scores are scaled cosines."""

    embed_texts: Callable[[list[str]], torch.Tensor]  # texts of one token count
    embed_images: Callable[[list[np.ndarray]], torch.Tensor]
    text_lengths: Callable[[list[str]], list[int]]
    scale: float
    batch_size: int

    def embed(self, texts: Sequence[str], images: Images) -> Embedded:
        """Each unique caption and image key of `texts` and `images` embedded once, in first-appearance order."""
        unique_texts, unique = list(dict.fromkeys(texts)), Images(tuple(dict.fromkeys(images.keys)), images.read)
        text_rows = invariant_map(self.embed_texts, unique_texts, self.batch_size, self.text_lengths(unique_texts))
        image_rows = invariant_map(lambda at: self.embed_images(unique.take(at)[:]), list(range(len(unique))),
                                   self.batch_size)
        return Embedded({t: n for n, t in enumerate(unique_texts)}, stacked(text_rows),
                        {k: n for n, k in enumerate(unique.keys)}, stacked(image_rows), self.scale)


@dataclass(frozen=True)
class CrossEncoder:
    """One forward pass per (caption, image) pair, each pair alone, in image-key order: a pair's score is the same
    whatever else is asked (a batch would pad its text to its longest and its image to its largest, and ViLT draws
    its patch order row by row from one seeded generator), and each image is read once (a one-image LRU)."""

    score: Callable[[list[str], list[np.ndarray]], torch.Tensor]

    def pairs(self, texts: Sequence[str], images: Images) -> np.ndarray:
        order = sorted(range(len(texts)), key=images.keys.__getitem__)  # stable: an image's captions keep their order
        keys = Images(tuple(images.keys[i] for i in order), lru_cache(maxsize=1)(images.read))
        out = [self.score([texts[i]], keys[at:at + 1]) for at, i in enumerate(order)]
        scores = torch.cat(out).numpy() if out else np.zeros(0, dtype=np.float32)
        return scores[np.argsort(order)]


def _indexer() -> defaultdict[str, int]:
    """Indices by first appearance: an unseen item gets the next one."""
    at: defaultdict[str, int] = defaultdict()
    at.default_factory = at.__len__
    return at


def _codes(texts: Sequence[str], keys: Sequence[str], text_at: dict[str, int], key_at: dict[str, int]) -> np.ndarray:
    """Each (text, image key) as image index << 32 | text index: sorted codes group each image's pairs."""
    image = np.array([key_at[k] for k in keys], dtype=np.int64)
    return image << 32 | np.array([text_at[t] for t in texts], dtype=np.int64)


@dataclass(frozen=True)
class Scored:
    """A cross-encoder's scores of the (caption, image key) pairs a run asked (`Asked.scored`), each scored once;
    `pairs` looks them up, and a pair that was not asked raises KeyError, never reads a wrong score."""

    texts: dict[str, int]
    keys: dict[str, int]
    codes: np.ndarray  # sorted, unique
    scores: np.ndarray

    def pairs(self, texts: Sequence[str], images: Images) -> np.ndarray:
        codes = _codes(texts, images.keys, self.texts, self.keys)
        at = np.searchsorted(self.codes, codes)
        if not np.array_equal(self.codes[np.minimum(at, len(self.codes) - 1)], codes):
            raise KeyError("a (caption, image) pair the run did not ask for")
        return self.scores[at]


class Asked:
    """A stand-in cross-encoder that answers zeros and records each (caption, image key) pair asked: what a run will
    ask, known before any forward pass (what a run asks never depends on the answers: first-stage candidates and
    fixed Δ pairs)."""

    def __init__(self) -> None:
        self.texts, self.keys, self.asked = _indexer(), _indexer(), [np.zeros(0, dtype=np.int64)]

    def pairs(self, texts: Sequence[str], images: Images) -> np.ndarray:
        self.asked.append(_codes(texts, images.keys, self.texts, self.keys))
        return np.zeros(len(texts), dtype=np.float32)

    def scored(self, model: CrossEncoder, read: Reader) -> Scored:
        """Every distinct pair asked, scored by `model` in one call: each image read once."""
        codes, texts, keys = np.unique(np.concatenate(self.asked)), list(self.texts), list(self.keys)
        scores = model.pairs([texts[c] for c in codes & 0xFFFFFFFF], Images(tuple(keys[c] for c in codes >> 32), read))
        return Scored(dict(self.texts), dict(self.keys), codes, scores)


Scorer = BiEncoder | CrossEncoder  # as loaded
PairScorer = Embedded | CrossEncoder | Scored | Asked  # ready to score a dataset's pairs


def load_scorer(spec: ClipSpec | ItmSpec, batch_size: int) -> Scorer:
    return _open_clip(spec, batch_size) if isinstance(spec, ClipSpec) else _hugging_face(spec, batch_size)


def _open_clip(spec: ClipSpec, batch_size: int) -> BiEncoder:
    clip = load_clip(spec)
    return BiEncoder(lambda texts: clip.embed_texts(texts, batch_size).cpu(),
                     lambda images: clip.embed_images(images, batch_size).cpu(), lambda texts: [0] * len(texts),
                     clip.model.logit_scale.detach().exp().item(), batch_size)


@load_once
def _load_hf(spec: ItmSpec) -> tuple:
    import transformers

    path, device = spec.local(), resolve_device(spec)
    processor = transformers.AutoProcessor.from_pretrained(path, **hub_kwargs(spec))
    model = getattr(transformers, spec.model_class).from_pretrained(path, **hub_kwargs(spec))
    return processor, model.to(device).eval(), device


def _hugging_face(spec: ItmSpec, batch_size: int) -> Scorer:
    processor, model, device = _load_hf(spec)

    @torch.inference_mode()
    def run(texts: list[str] | None, images: list[np.ndarray] | None, call: Callable) -> Any:  # a model's output
        """One forward pass, seeded: a model that draws (ViLT shuffles its image patches, which moves scores by
        float rounding) scores the same input the same way in every run. The global generator is the process's: one
        seeded pass at a time (`SEEDED`), or another model's, run by another thread of the evaluate flow, reseeds or
        restores it mid-pass."""
        inputs = processor(text=texts, images=[Image.fromarray(x) for x in images] if images else None,
                           return_tensors="pt", padding=True, truncation=True)
        with SEEDED, torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(0)
            return call(**inputs.to(device))

    if spec.index is None:
        def text(texts: list[str]) -> torch.Tensor:
            return F.normalize(run(texts, None, model.get_text_features).pooler_output.float(), dim=-1).cpu()

        def image(images: list[np.ndarray]) -> torch.Tensor:
            return F.normalize(run(None, images, model.get_image_features).pooler_output.float(), dim=-1).cpu()

        def lengths(texts: list[str]) -> list[int]:
            return [len(ids) for ids in processor.tokenizer(texts, truncation=True)["input_ids"]]

        return BiEncoder(text, image, lengths, model.logit_scale.detach().exp().item(), batch_size)
    return CrossEncoder(lambda texts, images: getattr(run(texts, images, model), spec.logits)[:, spec.index]
                        .float().cpu())
