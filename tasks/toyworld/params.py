"""The training schedule of the toy world's miniature models."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    """`cfgen toy-world train`'s schedule; its defaults made the committed weights (`tasks/toyworld/weights`)."""

    seed: int = 0
    vae_steps: int = 600
    diffusion_steps: int = 3000
    clip_steps: int = 800
    lm_steps: int = 400
    batch: int = 32
    lr: float = 1e-3
