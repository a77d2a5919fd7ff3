"""The diffusion model's accuracy read-out during training: the share of fixed toy-world scenes whose caption, drawn
by the pipeline's sampler from the training modules, the checker reads back as stated.

Invariants:
- `sampler` builds its `Diffusion` from copies of the modules: a read-out changes no training module.
- The scenes are drawn from their own `random.Random(ACCURACY_SCENES)` and scene i's noise from seed i: a read-out
  draws from no generator the training draws from (and `Trainer.fit` runs it under `torch.random.fork_rng` besides).
"""

from __future__ import annotations

import copy
import random

import numpy as np
import torch
from diffusers.training_utils import EMAModel

from tasks.image.backends.sd1 import SD1
from tasks.image.sampling import Sample, render
from tasks.tiny.images import TINY_IMAGE_SIZE
from tasks.toyworld import checker, models, world
from tasks.toyworld.batches import clip_tokenizer
from tasks.toyworld.loop import Run

SCENE_KINDS = ("one object", "counted", "two related")
ACCURACY_SCENES = "accuracy"  # the seed of the fixed scenes the accuracy is read on (no training stream's)


def sampler(unet, text_encoder, vae, ema: EMAModel, scale: float, device: torch.device, spacing: str) -> SD1:
    """The pipeline's SD v1 backend as `sd1.load_diffusion` builds it from an assembled folder (fp32, eager, P2P
    processors installed, the assembly's scheduler: `spacing`), from copies of the training modules, the UNet with
    `ema`'s weights."""
    unet, text_encoder, vae = (copy.deepcopy(m).eval().requires_grad_(False) for m in (unet, text_encoder, vae))
    ema.copy_to(unet.parameters())
    return SD1.assemble(clip_tokenizer(), text_encoder, unet, vae, models.scheduler(spacing), scale,
                        None, device, torch.float32)


def scene_kind(spec: world.Spec) -> str:
    return SCENE_KINDS[2] if spec.relation else SCENE_KINDS[1] if spec.phrases[0].count > 1 else SCENE_KINDS[0]


def readout(diffusion: SD1, scenes: int, steps: int, guidance: float, seeds: int = 1,
            key: str = ACCURACY_SCENES) -> list[tuple[world.Spec, bool]]:
    """(spec, shown) of each of `scenes` fixed scenes (drawn from `random.Random(key)`) × `seeds` samples: its caption
    drawn alone by the pipeline's sampler (scene i from seeds i, i + scenes, ...; no attention sharing), read back by
    the checker."""
    rng, out = random.Random(key), []
    for i in range(scenes):
        spec, _ = world.sample(rng)
        text = world.caption(spec)
        images = render(diffusion, diffusion.encode(text, text), [Sample(i + k * scenes, 0.0, guidance)
                                                                  for k in range(seeds)], steps, TINY_IMAGE_SIZE).images
        out += [(spec, checker.shows(image, spec)) for image in images[:, 0]]
    return out


def accuracy(diffusion: SD1, run: Run) -> dict[str, float | None]:
    """The share of `run.eval_scenes` fixed scenes (`readout`, one seed each) the checker reads back as stated: over
    all scenes and per `SCENE_KINDS` (None for a kind none of the scenes is)."""
    shown: dict[str, list[bool]] = {kind: [] for kind in SCENE_KINDS}
    for spec, ok in readout(diffusion, run.eval_scenes, run.eval_steps, run.eval_guidance):
        shown[scene_kind(spec)].append(ok)
    every = [s for kind in shown.values() for s in kind]
    return {"all": round(float(np.mean(every)), 4),
            **{kind: round(float(np.mean(s)), 4) if s else None for kind, s in shown.items()}}
