"""Params section of the toy world's ground-truth stage, and the training schedule of its models."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from tasks.core.params import Section


@dataclass(frozen=True)
class Schedule:
    """`cfgen toy-world train`'s recipe: what a run computes (`tasks.toyworld.train`). Its defaults made the committed
    weights (`tasks/toyworld/weights`): a field added later defaults to what runs before it did, so a `train.json`
    without it reads back as the schedule that ran (`from_record`), and the models assemble from what it records.

    `draw`: "stream" (one `random.Random(seed)` drawn in the training process, shared by every model in step order:
    the committed run) or "pool" (batch i of each model drawn from its own seed, by worker processes ahead of the
    steps). `attention_heads`: heads per UNet attention layer (diffusers' `attention_head_dim`, which its
    UNet2DConditionModel reads as a number of heads: 8 heads are 4 channels wide at the 32-channel level).
    `min_snr_gamma`: Min-SNR-γ weighting of the ε-loss (None: the plain mean squared error). `ema_decay`: the UNet's
    EMA. `batch` and `lr` are every model's (the CLIP model draws 4 × `batch` images a step)."""

    MODELS: ClassVar[tuple[str, ...]] = ("vae", "diffusion", "clip", "lms")  # what a run may train (`--only`)

    seed: int = 0
    vae_steps: int = 600
    diffusion_steps: int = 3000
    clip_steps: int = 800
    lm_steps: int = 400
    batch: int = 32
    lr: float = 1e-3
    draw: Literal["stream", "pool"] = "stream"
    attention_heads: int = 8
    min_snr_gamma: float | None = None
    ema_decay: float = 0.999

    @classmethod
    def from_record(cls, schedule: dict) -> Schedule:
        """The schedule a `train.json`'s `schedule` records (a field it lacks: that field's default)."""
        return cls(**schedule)


class TruthParams(Section):
    """`cfgen truth` (`tasks.toyworld.truth`): every generated sample and selected pair read back by the toy world's
    checker. Only the demo runs on the toy world: elsewhere its captions are no world captions, so it stays off."""

    enabled: bool = False

    def check(self, params) -> None:
        """The truth stage reads images back into the toy world: with random models its numbers would mean nothing."""
        tiny = getattr(params, "tiny_models", None)
        if self.enabled and tiny is not None and tiny.toy_world is None:
            raise ValueError("truth.enabled needs the toy world's models (tiny_models.toy_world); with random ones "
                             "its truth means nothing: set truth.enabled to false")
