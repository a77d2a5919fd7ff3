"""The image edit: the removed classes' mask (union of their boxes, `dilate` pixels wider) filled in the real image.

Fills: `inpaint` runs a diffusers inpainting pipeline on the image squashed to `size`×`size` (the model's square
input), prompted with the edited caption and the removed classes as negative prompt, seeded per edit; `zero`,
`mean` (the image's mean colour) and `blur` (a Gaussian blur of the image) are the paper's ablation fills. Whatever
the fill, its result is resized back to the original resolution and pasted inside the mask only: every pixel
outside the mask is the real image's, and I_1 has I_0's size.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageFilter

from tasks.core.keys import digest
from tasks.core.loading import hub_kwargs, load_once, resolve_device, resolve_dtype, thread_invariant_convolutions
from tasks.core.specs import ModelSpec
from tasks.removal.masks import union_mask
from tasks.removal.params import InpaintParams


def mask_of(edit: dict, params: InpaintParams) -> np.ndarray:
    """(H, W) booleans: the removed classes' boxes, dilated by `params.dilate` pixels (a square structuring element)."""
    mask = union_mask(edit["boxes"], edit["width"], edit["height"])
    if params.dilate:
        grown = Image.fromarray(mask).convert("L").filter(ImageFilter.MaxFilter(2 * params.dilate + 1))
        mask = np.asarray(grown) > 0
    return mask


def prompts(edit: dict, params: InpaintParams) -> tuple[str, str]:
    removed = ", ".join(edit["removed"])
    return (params.prompt.format(caption=edit["edited_caption"], removed=removed),
            params.negative_prompt.format(caption=edit["edited_caption"], removed=removed))


def edit_seed(edit: dict, params: InpaintParams) -> int:
    """A seed per edit, from the params seed and what the edit is (not from its position in a run)."""
    return int(digest(str(params.seed), edit["image_id"], *edit["removed"], edit["caption_id"])[:8], 16)


@load_once
def load_inpainter(spec: ModelSpec):
    from diffusers import StableDiffusionInpaintPipeline


    device = resolve_device(spec)
    pipe = StableDiffusionInpaintPipeline.from_pretrained(
        spec.local(), dtype=resolve_dtype(spec, device), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False, **hub_kwargs(spec))
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)


FILL_FIELDS = {"zero": (), "mean": (), "blur": ("blur_radius",),
               "inpaint": ("model", "size", "steps", "guidance_scale", "prompt", "negative_prompt", "seed")}


def read_fields(fill: str) -> tuple[str, ...]:
    """The `InpaintParams` fields that fix a `fill`'s output (every fill reads its mask's `dilate`)."""
    return ("fill", "dilate", *FILL_FIELDS[fill])


def load_models(params: InpaintParams):
    """The inpainting pipeline when `fill` is `inpaint`; the other fills need no model."""
    return load_inpainter(params.model) if params.fill == "inpaint" else None


def _inpainted(image: np.ndarray, mask: np.ndarray, edit: dict, params: InpaintParams, pipe) -> np.ndarray:
    import torch

    prompt, negative = prompts(edit, params)
    square = (params.size, params.size)
    with thread_invariant_convolutions():
        result = pipe(prompt=prompt, negative_prompt=negative,
                      image=Image.fromarray(image).resize(square, Image.Resampling.BICUBIC),
                      mask_image=Image.fromarray(mask).convert("L").resize(square, Image.Resampling.NEAREST),
                      height=params.size, width=params.size, num_inference_steps=params.steps,
                      guidance_scale=params.guidance_scale,
                      generator=torch.Generator().manual_seed(edit_seed(edit, params)), output_type="np").images[0]
    filled = Image.fromarray(np.round(result * 255).clip(0, 255).astype(np.uint8))
    return np.asarray(filled.resize((image.shape[1], image.shape[0]), Image.Resampling.BICUBIC))


def fill(image: np.ndarray, edit: dict, params: InpaintParams, pipe=None) -> np.ndarray:
    """I_1: `image` (HxWx3 uint8) with the edit's mask filled by `params.fill`; equal to `image` outside the mask."""
    mask = mask_of(edit, params)
    if params.fill == "zero":
        source = np.zeros_like(image)
    elif params.fill == "mean":
        source = np.broadcast_to(np.round(image.reshape(-1, 3).mean(axis=0)).astype(np.uint8), image.shape)
    elif params.fill == "blur":
        source = np.asarray(Image.fromarray(image).filter(ImageFilter.GaussianBlur(params.blur_radius)))
    else:
        source = _inpainted(image, mask, edit, params, pipe)
    return np.where(mask[..., None], source, image)
