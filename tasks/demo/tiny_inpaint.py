"""Tiny random stand-in for `stable-diffusion-v1-5/stable-diffusion-inpainting`: a `StableDiffusionInpaintPipeline`
folder in the hub layout, loaded by `from_pretrained` offline.

Its UNet takes the inpainting input, 9 channels (4 noisy latents + 1 mask + 4 masked-image latents), and predicts 4;
the VAE, text encoder and CLIP BPE tokenizer are those of `build_tiny_diffusion` (32x32 images, 4x4 latents, any
multiple of 8 works). No safety checker. The same seed gives a byte-identical folder; its images are noise.
"""

from __future__ import annotations

from pathlib import Path

from diffusers import DDIMScheduler, StableDiffusionInpaintPipeline

from tasks.core.specs import ModelSpec
from tasks.tiny.images import SD_BETAS, TINY_UNET, clip_bpe_tokenizer, tiny_sd_modules

INPAINT_CHANNELS = 4 + 1 + 4


def build_tiny_inpaint(output: Path, seed: int) -> ModelSpec:
    """Write the tiny inpainting pipeline to `output`; returns its spec."""
    unet, vae, text_encoder = tiny_sd_modules(seed, {**TINY_UNET, "in_channels": INPAINT_CHANNELS, "out_channels": 4})
    StableDiffusionInpaintPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=clip_bpe_tokenizer(), unet=unet,
        scheduler=DDIMScheduler(**SD_BETAS, clip_sample=False, set_alpha_to_one=False),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    ).save_pretrained(output)
    return ModelSpec(id=str(output))
