"""Params section of the toy world's ground-truth stage, and the training schedule of its models."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from tasks.core.params import Section

WEIGHTS = Path(__file__).parent / "weights"  # the committed weights
CHECKPOINT = "checkpoint.pt"  # a run's checkpoint, in its staging folder
UNET_CHANNELS = (32, 64, 64)  # per UNet level (`models.diffusion_modules`); an attention layer's heads split them
RECORD = "toy_world.json"  # beside an assembled diffusion folder: the weights' and its content hashes (`assemble`)


@dataclass(frozen=True)
class Schedule:
    """`cfgen toy-world train`'s recipe: what a run computes (`tasks.toyworld.train`). Its defaults made the committed
    diffusion model (`tasks/toyworld/weights`, `--only diffusion` on the VAE, CLIP model and LMs of the run before)
    and then its CLIP model (`--only clip` on that diffusion model);
    a record lacking a field ran before the field existed, so `from_record` reads it as `BEFORE` says that run did.

    `draw`: "stream" (one `random.Random(seed)` drawn in the training process, shared by every model in step order:
    the committed run) or "pool" (batch i of each model drawn from its own seed, by worker processes ahead of the
    steps). `attention_heads`: heads per UNet attention layer (diffusers' `attention_head_dim`, which its
    UNet2DConditionModel reads as a number of heads: 2 heads are 16 channels wide at the 32-channel level).
    `min_snr_gamma`: Min-SNR-γ weighting of the ε-loss (None: the plain mean squared error). `ema_decay`: the UNet's
    EMA. `batch` and `lr` are every model's (the CLIP model draws 4 × `batch` images a step).

    Issue 63's parts: `parse_steps` > 0 pre-trains the text encoder to parse captions (`tasks.toyworld.parse`) for
    that many steps, then freezes it while the UNet trains (so the sampler's encoder is the one the UNet's EMA was
    fitted to; 0: trained with the UNet); `grounding` weighs the cross-attention grounding loss
    (`tasks.toyworld.grounding`, ramped in over the first `RAMP` of the UNet's steps); `low_snr` is the share of
    timesteps drawn from SNR ≤ 1 (t ≥ `LOW_SNR_T`) instead of uniformly, over the first half of the UNet's steps;
    `spacing` is the sampler's timestep spacing in the assembled folder and the accuracy read-out ("leading": SD v1's,
    starting at t = 901 of 1000 for 10 steps; "trailing": at 999)."""

    MODELS: ClassVar[tuple[str, ...]] = ("vae", "diffusion", "clip", "lms")  # what a run may train (`--only`)
    RAMP: ClassVar[float] = 0.1
    LOW_SNR_T: ClassVar[int] = 354  # SNR(t) ≤ 1 from here on, with SD's betas
    BEFORE: ClassVar[dict] = {  # the recipe before issue 63 (a137a7e), for the fields its records may lack
        "draw": "stream", "attention_heads": 8, "min_snr_gamma": None, "ema_decay": 0.999, "parse_steps": 0,
        "grounding": 0.0, "low_snr": 0.0, "spacing": "leading"}

    seed: int = 0
    vae_steps: int = 600
    diffusion_steps: int = 9375
    clip_steps: int = 4000
    lm_steps: int = 400
    batch: int = 32
    lr: float = 1e-3
    draw: Literal["stream", "pool"] = "stream"
    attention_heads: int = 2
    min_snr_gamma: float | None = 5.0
    ema_decay: float = 0.999
    parse_steps: int = 500
    grounding: float = 0.1
    low_snr: float = 0.3
    spacing: Literal["leading", "trailing"] = "trailing"

    @classmethod
    def from_record(cls, schedule: dict) -> Schedule:
        """The schedule a `train.json`'s `schedule` records (a field it lacks: `BEFORE`'s)."""
        return cls(**cls.BEFORE | schedule)


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
