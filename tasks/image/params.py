"""Params sections of the image stages: generate (paired Prompt-to-Prompt over-generation, adaptive mode) and
selection."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, Field, model_validator

from tasks.core import layouts
from tasks.core.fields import VAE_FACTOR, Cosine, Frozen, Seed, Unit, WordPrompt, ordered, unkeyed
from tasks.core.licenses import LICENSES
from tasks.core.params import Section
from tasks.core.specs import ClipSpec, ModelSpec


class AdaptiveParams(Frozen):
    """Over-generation in rounds of `round_samples`, stopping a pair once `min_accepted` samples pass selection's
    thresholds."""

    enabled: bool = False
    min_accepted: int = Field(1, ge=1)
    round_samples: int = Field(10, ge=1)


@dataclass(frozen=True)
class BackendNeeds:
    """What an image backend asks of a run, known without loading it: `entry`, its `backends.Diffusion` class
    (`"module:Class"`, resolved when chosen: a sample's key holds the chosen backend's code and no other's); UNet rows
    per sample per denoising step; the components of its diffusion folder that its loader reads besides vae/ (folder
    -> files, one of which holds it); the plan's reference rate, UNet rows/s on one H100 at `reference`; and the
    license of the family's published weights (a key of `licenses.LICENSES`), which a diffusion spec naming none and
    whose folder has no model card comes under."""

    entry: str
    rows_per_sample: int
    components: Mapping[str, tuple[str, ...]]
    h100_rows_per_second: float
    reference: str
    license: str

    def __post_init__(self) -> None:
        if self.license not in LICENSES:
            raise ValueError(f"backend license {self.license!r} is no key of licenses.LICENSES")


# cfgen's paired P2P sampler on one H100 80GB HBM3: SD v1.5's UNet shape (random weights) at 512 px, float16, 20
# steps, 32 UNet rows per call, compile_unet auto (CUDA graphs), VAE decode included; `benchmarks/image_stage.py`,
# 2026-11-27 (issue 46: stock diffusers 310 rows/s eager, 432 compiled).
H100_SD15_512_ROWS_PER_SECOND = 432.0
# SDXL 1.0 base at 1024 px: the SD v1.5 rate times the ratio of UNet GFLOPs per row, SD v1.5 at 512 px (803.3) over
# SDXL at 1024 px (6761.2), both counted by `torch.utils.flop_counter` on the published shapes
# (`benchmarks/sdxl_rehearsal.py`, whose table checks such a ratio against both UNets' measured rows/s on a CPU).
# Not measured on an H100: 51 rows/s until a run there replaces it.
SDXL_1024_H100_ROWS_PER_SECOND = H100_SD15_512_ROWS_PER_SECOND * 803.3 / 6761.2

# SD 3.5 Medium at 1024 px (4096 image + 333 text tokens): derived as SDXL's, the SD v1.5 rate times the ratio of
# GFLOPs per row, SD v1.5's UNet at 512 px (803.3) over SD 3.5 Medium's transformer (11249.6; SD3 Medium's: 8904.3),
# counted by `torch.utils.flop_counter` on the published config built on the meta device, 2026-11-28.
# Not measured on an H100: 31 rows/s until a run there replaces it.
SD35_MEDIUM_1024_H100_ROWS_PER_SECOND = H100_SD15_512_ROWS_PER_SECOND * 803.3 / 11249.6

Backend = Literal["sd1", "sd3", "sdxl"]  # a key of BACKEND_NEEDS, in its order

BACKEND_NEEDS: dict[Backend, BackendNeeds] = {
    "sd1": BackendNeeds("tasks.image.backends.sd1:SD1",
                        rows_per_sample=4,  # the o/c pair x (uncond, cond): classifier-free guidance
                        components=layouts.SD1,
                        h100_rows_per_second=H100_SD15_512_ROWS_PER_SECOND,
                        reference="SD v1.5 at 512 px, measured 2026-11-27",
                        license="creativeml-openrail-m"),
    "sd3": BackendNeeds("tasks.image.backends.sd3:SD3",
                        rows_per_sample=4,  # as sd1: the o/c pair x (uncond, cond)
                        components=layouts.SD3,
                        h100_rows_per_second=SD35_MEDIUM_1024_H100_ROWS_PER_SECOND,
                        reference="SD 3.5 Medium at 1024 px, from SD v1.5's rate by denoiser FLOPs",
                        license="stabilityai-ai-community"),
    "sdxl": BackendNeeds("tasks.image.backends.sdxl:SDXL",
                         rows_per_sample=4,  # as sd1: the o/c pair x (uncond, cond)
                         components=layouts.SDXL,
                         h100_rows_per_second=SDXL_1024_H100_ROWS_PER_SECOND,
                         reference="SDXL 1.0 at 1024 px, from SD v1.5's rate by UNet FLOPs",
                         license="openrail++"),
}


class GenerateParams(Section):
    """Paired Prompt-to-Prompt sampling. `guidance_scale` and `p2p_fraction` are U(lo, hi) ranges drawn per sample."""

    backend: Backend = Field("sd1", description="the diffusion model family `diffusion` is (`BACKEND_NEEDS`): sd1 "
                                                "is Stable Diffusion v1, sdxl SDXL, sd3 SD3 / SD3.5 (flow matching)")
    diffusion: ModelSpec = ModelSpec(id="stable-diffusion-v1-5/stable-diffusion-v1-5")
    vae: ModelSpec | None = Field(ModelSpec(id="stabilityai/sd-vae-ft-mse"),
                                  description="replaces the diffusion folder's vae/ (None keeps it); only its id and "
                                              "revision count: it runs on the diffusion spec's device and dtype")
    clip: ClipSpec = ClipSpec()
    size: int = Field(512, ge=VAE_FACTOR, multiple_of=VAE_FACTOR, description="image height and width in pixels")
    steps: int = Field(100, ge=1, le=1000, description="denoising steps (at most SD's 1000 training steps: "
                                                     "every step's noise is drawn before the first)")
    n_samples: int = unkeyed(100, "samples (seeds) per caption pair; each sample is cached alone", ge=1)
    guidance_scale: Annotated[tuple[float, float], AfterValidator(ordered)] = (7.5, 15.0)
    p2p_fraction: Annotated[tuple[Unit, Unit], AfterValidator(ordered)] = (0.1, 0.9)
    p2p_tokens: bool = Field(False, description="sd1: while a pair shares, its c row also takes the o row's "
                                                "cross-attention maps of the tokens C_c shares with C_o "
                                                "(Prompt-to-Prompt's word swap, `p2p.tokens`); sdxl always does, "
                                                "sd3 (joint attention) never")
    subject_prompt: WordPrompt = Field("a photo of a {word}", description="the both-subjects check's CLIP prompt for a "
                                                                    "swapped noun (`{word}`: C_o's or C_c's)")
    p2p_layers: tuple[Annotated[int, Field(ge=0)], ...] | None = Field(
        None, description="sd3 only: the joint transformer blocks whose attention shares (Stable Flow's 'vital "
                          "layers', `joint_p2p`); None: every block")
    seed: Seed = 0
    batch_samples: int = unkeyed(1, "samples per UNet call (the backend's `rows_per_sample` rows each); after a "
                                    "CUDA OOM the halved size is kept for the rest of the process. 1: each sample "
                                    "alone, its bytes independent of what else is rendered", ge=1)
    pairs_per_task: int = unkeyed(8, "caption pairs per Prefect task (cut to near-equal sample counts, the "
                                     "heaviest first): the unit a Dask worker takes", ge=1)
    channels_last: bool = Field(False, description="UNet and VAE in channels_last memory format (10% slower in "
                                                   "eager fp16 on an H100: off in every profile)")
    compile_unet: Literal["auto", "off", "default", "reduce-overhead", "max-autotune"] = Field(
        "auto", description="torch.compile mode of the UNet: auto is reduce-overhead (CUDA graphs) on CUDA and eager "
                            "elsewhere; a slow first call, faster steps after")
    black_threshold: int = unkeyed(4, "an image with every pixel <= this is black (applied after the cache)",
                                   ge=0, le=255)
    clip_batch_size: int = unkeyed(32, "images per CLIP forward pass", ge=1)
    adaptive: AdaptiveParams = unkeyed(AdaptiveParams(), "when to stop sampling a pair; each sample is cached alone")

    @model_validator(mode="after")
    def _layers_of_sd3(self) -> GenerateParams:
        if self.p2p_layers is not None and self.backend != "sd3":
            raise ValueError(f"generate.p2p_layers is sd3's (joint attention): backend {self.backend} shares in every "
                             "attention layer")
        return self

    @property
    def needs(self) -> BackendNeeds:
        return BACKEND_NEEDS[self.backend]

    def components(self) -> Mapping[str, tuple[str, ...]]:
        return self.needs.components


RankKey = Literal["clip_dir", "min_text_image", "subject_margin"]  # selection's ranking keys (thresholds.RANKING)
RANK_KEYS: tuple[RankKey, ...] = get_args(RankKey)
Margin = Annotated[float, Field(ge=-2.0, le=2.0)]  # a difference of two cosines


class SelectionParams(Section):
    """CLIP thresholds in [-1, 1], all inclusive (`score >= min`), and the both-subjects check (paper App. A.3: both
    altered subjects shown), exclusive (`margin > min`, so a tie fails); among passing samples the highest `rank_by`
    wins."""

    min_text_image_o: Cosine = Field(0.2, description="sim(C_o, I_o)")
    min_text_image_c: Cosine = Field(0.2, description="sim(C_c, I_c)")
    min_image_image: Cosine = Field(0.7, description="sim(I_o, I_c)")
    min_clip_dir: Cosine = Field(0.2, description="cos(E_I(I_c) - E_I(I_o), E_T(C_c) - E_T(C_o))")
    min_subject_margin_o: Margin | None = Field(0.0, description="the both-subjects check on I_o: s(I_o, prompt("
                                                "original)) - s(I_o, prompt(substitute)) must exceed it; None: off")
    min_subject_margin_c: Margin | None = Field(0.0, description="on I_c: s(I_c, prompt(substitute)) - "
                                                "s(I_c, prompt(original)) must exceed it; None: off")
    rank_by: RankKey = Field("clip_dir", description="which passing sample of a pair wins: clip_dir (the paper's), "
                                                     "min_text_image (min of sim(C_o, I_o) and sim(C_c, I_c)) or "
                                                     "subject_margin (min of the two subject margins; clip_dir where "
                                                     "the check does not apply)")

    def thresholds(self) -> dict[str, float]:
        """Score column -> inclusive minimum."""
        return {"sim_text_image_o": self.min_text_image_o, "sim_text_image_c": self.min_text_image_c,
                "sim_image_image": self.min_image_image, "clip_dir": self.min_clip_dir}

    def subject_margins(self) -> dict[str, float]:
        """Subject-margin column -> exclusive minimum, for the checks that are on (a null margin passes: the edit
        swapped no noun)."""
        margins = {"subject_margin_o": self.min_subject_margin_o, "subject_margin_c": self.min_subject_margin_c}
        return {name: minimum for name, minimum in margins.items() if minimum is not None}
