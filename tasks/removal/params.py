"""Params sections of the object-removal strategy (Kim et al., "Exposing and Mitigating Spurious Correlations for
Cross-Modal Retrieval"): which class of a real image to remove, the caption edit, the image fill, the CLIP check."""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Field, ValidationInfo, field_validator

from tasks.core.fields import VAE_FACTOR, Cosine, Seed, Unit, template_check
from tasks.core.params import Section
from tasks.core.specs import ClipSpec, ModelSpec

FillPrompt: TypeAlias = Annotated[str, template_check(caption="a dog", removed="cat")]  # the inpainting prompts
ClassPrompt: TypeAlias = Annotated[str, template_check(name="dog")]  # the CLIP check's prompt of a removed class


class RemovalMasksParams(Section):
    """For each class c_r of an image (mask_q = union of its boxes): skip when area(mask_q) / area(image) > alpha3;
    remove c_r alone when every other class g overlaps it by |mask_q ∩ mask_g| / |mask_g| < alpha1; remove it with
    every g overlapping by > alpha2 when some does; otherwise skip."""

    alpha1: Unit = 0.4
    alpha2: Unit = 0.8
    alpha3: Unit = 0.7

    @field_validator("alpha2")
    @classmethod
    def _above_alpha1(cls, alpha2: float, info: ValidationInfo) -> float:
        if "alpha1" in info.data and not info.data["alpha1"] <= alpha2:
            raise ValueError(f"must be >= alpha1 ({info.data['alpha1']}), got {alpha2}")
        return alpha2


class RemovalCaptionsParams(Section):
    """The caption edit: delete every noun phrase (an NLTK RegexpParser chunk) that names a removed class."""

    grammar: str = Field(r"NP: {<DT|PRP\$|CD>*<JJ.*|VBN|VBG>*<NN.*>+}",
                         description="NLTK RegexpParser grammar whose NP chunks are the deletable noun phrases")
    captions_per_image: int = Field(1, ge=1, description="edited captions kept per (image, removal), first by "
                                                         "caption id (the paper: one)")
    require_mention: bool = Field(True, description="a caption that names no removed class is not edited into a "
                                                    "pair (its two captions would be identical)")


class InpaintParams(Section):
    """The image edit: the removed classes' mask filled by a diffusers inpainting pipeline (`inpaint`) or by one of
    the paper's ablation fills (`zero`, `mean`: the image mean, `blur`: a Gaussian blur of the masked region)."""

    fill: Literal["inpaint", "zero", "mean", "blur"] = "inpaint"
    model: ModelSpec = ModelSpec(id="stable-diffusion-v1-5/stable-diffusion-inpainting")
    size: int = Field(512, ge=VAE_FACTOR, multiple_of=VAE_FACTOR, description="the inpainting model's square "
                                                                              "input size in pixels")
    steps: int = Field(50, ge=1, le=1000)  # at most SD's 1000 training steps
    guidance_scale: float = Field(7.5, ge=0.0)
    prompt: FillPrompt = Field("{caption}", description="template over the edited caption ({caption}) and the "
                                                        "removed classes ({removed})")
    negative_prompt: FillPrompt = "{removed}"
    dilate: int = Field(0, ge=0, description="pixels the mask grows by before filling")
    blur_radius: float = Field(8.0, gt=0.0, description="Gaussian radius of the `blur` fill")
    seed: Seed = 0

    def idle_models(self) -> tuple[str, ...]:
        """The inpainting model loads for `fill: inpaint` only."""
        return () if self.fill == "inpaint" else ("model",)


class RemovalSelectionParams(Section):
    """CLIP check of each edit, and the pairs' seeded train / validation / test split (by image)."""

    clip: ClipSpec = ClipSpec()
    prompt: ClassPrompt = "a photo of a {name}"
    min_drop: float = Field(0.0, description="keep when every removed class's prompt scores more than this lower "
                                             "(cosine) on the edited image than on the original")
    min_text_image: Cosine = Field(-1.0, description="sim(edited caption, edited image) at least")
    validation_share: Unit = 0.1
    test_share: Unit = Field(0.2, description="with validation_share at most 1: train gets the rest")
    seed: Seed = 0

    @field_validator("test_share")
    @classmethod
    def _shares_fit(cls, test: float, info: ValidationInfo) -> float:
        if test + info.data.get("validation_share", 0.0) > 1:
            raise ValueError(f"validation_share + test_share is {test + info.data['validation_share']:g}, over 1")
        return test
