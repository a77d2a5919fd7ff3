"""Params section of the toy world's ground-truth stage, and the training schedule of its models."""

from __future__ import annotations

from dataclasses import dataclass

from tasks.core.specs import Frozen


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


class TruthParams(Frozen):
    """`cfgen truth` (`tasks.toyworld.truth`): every generated sample and selected pair read back by the toy world's
    checker. Only the demo runs on the toy world: elsewhere its captions are no world captions, so it stays off."""

    enabled: bool = False
