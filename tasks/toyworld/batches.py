"""The toy-world training batches: `make(rng, n)` draws one model's batch of n from `rng` alone, and `Pool` draws a
model's batches ahead of its steps in worker processes.

Invariants:
- A batch is a function of its `rng`'s state and its size: it draws from no other generator (torch's included).
- `Pool`'s batch i of a model is drawn from `random.Random(f"{key}:{i}")` alone, so its stream is the same for any
  number of workers.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from tasks.tiny.images import TINY_IMAGE_SIZE, clip_bpe_tokenizer
from tasks.toyworld import world

SUBJECT_PROMPT = "a photo of a {word}"  # the both-subjects check's prompt (generate.subject_prompt)


def draw_scenes(rng: random.Random, n: int) -> tuple[torch.Tensor, list[world.Spec], list[tuple[world.Obj, ...]]]:
    """(n, 3, 32, 32) images in [-1, 1], their specs and their scenes."""
    specs, scenes = zip(*(world.sample(rng) for _ in range(n)), strict=True)
    pixels = np.stack([world.render(scene, TINY_IMAGE_SIZE) for scene in scenes])
    return torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 127.5 - 1, list(specs), list(scenes)


def draw(rng: random.Random, n: int) -> tuple[torch.Tensor, list[world.Spec]]:
    """(n, 3, 32, 32) images in [-1, 1] and their specs."""
    return draw_scenes(rng, n)[:2]


def negative(rng: random.Random, spec: world.Spec) -> world.Spec:
    """`spec` with one fact changed: a shape, a colour, the relation, or the two phrases' places."""
    i = rng.randrange(len(spec.phrases))
    phrase = spec.phrases[i]
    kind = rng.choice(["shape", "colour"] + (["relation", "order"] if spec.relation else []))
    if kind == "shape":
        return world.with_phrase(spec, i, shape=rng.choice([s for s in world.SHAPES if s != phrase.shape]))
    if kind == "colour":
        return world.with_phrase(spec, i, colour=rng.choice([c for c in world.COLOURS if c != phrase.colour]))
    if kind == "relation":
        return replace(spec, relation=rng.choice([r for r in world.RELATIONS if r != spec.relation]))
    return replace(spec, phrases=spec.phrases[::-1])


clip_tokenizer = functools.cache(clip_bpe_tokenizer)  # one per process (a pool worker builds its own)


def clip_ids(texts: list[str]) -> torch.Tensor:
    return clip_tokenizer()(texts, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids


def token_ids(rng: random.Random, n: int = 4000) -> torch.Tensor:
    """Every token of the world's captions, its subject prompts and the empty prompt, sorted."""
    texts = [world.caption(world.sample(rng)[0]) for _ in range(n)] + [""]
    texts += [SUBJECT_PROMPT.format(word=w) for w in (*world.SHAPES, *world.COLOURS, *world.SIZES)]
    ids = {i for row in clip_tokenizer()(texts)["input_ids"] for i in row}
    return torch.tensor(sorted(ids))


def vae_batch(rng: random.Random, n: int) -> torch.Tensor:
    return draw(rng, n)[0]


def captioned(rng: random.Random, n: int) -> tuple[torch.Tensor, list[str], list[tuple[world.Obj, ...]]]:
    """Images, their captions (one dropped, the empty prompt, with probability 0.1) and their scenes."""
    images, specs, scenes = draw_scenes(rng, n)
    return images, [world.caption(s) if rng.random() >= 0.1 else "" for s in specs], scenes


def diffusion_batch(rng: random.Random, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Images and their captions' token ids (`captioned`)."""
    images, texts, _ = captioned(rng, n)
    return images, clip_ids(texts)


def clip_batch(rng: random.Random, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Images, then the token ids of their n captions followed by their n hard negatives'."""
    images, specs = draw(rng, n)
    texts = [world.caption(s) for s in specs] + [world.caption(negative(rng, s)) for s in specs]
    return images, clip_ids(texts)


def caption_batch(rng: random.Random, n: int) -> list[str]:
    return [world.caption(world.sample(rng)[0]) for _ in range(n)]


class Pool(IterableDataset):
    """Batches `start`, `start + 1`, ... of one model, batch i drawn by `make(random.Random(f"{key}:{i}"), size)`: in a
    `DataLoader` of W workers, worker w draws the batches start + w, start + w + W, ..., and the loader yields them in
    order, so the stream is the same for any W."""

    def __init__(self, make: Callable[[random.Random, int], Any], size: int, key: str, start: int) -> None:
        self.make, self.size, self.key, self.start = make, size, key, start

    def __iter__(self) -> Iterator[Any]:
        worker = get_worker_info()
        first, stride = (worker.id, worker.num_workers) if worker else (0, 1)
        for i in itertools.count(self.start + first, stride):
            yield self.make(random.Random(f"{self.key}:{i}"), self.size)
