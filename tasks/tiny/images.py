"""Tiny random stand-ins for the image models, written to disk in the real layouts and loaded by the real loaders.

`build_tiny_diffusion` writes a Stable Diffusion v1 folder (unet/, vae/, text_encoder/, tokenizer/, scheduler/) whose
tokenizer is the real CLIP BPE (open_clip's bundled merges), so 77-token truncation behaves as in the paper setup;
its networks (`tiny_sd_modules`, shared with the inpainting stand-in) are a few channels wide and map 32x32 images to
4x4 latents. `build_tiny_sdxl` writes an SDXL folder the same way, saved by `StableDiffusionXLPipeline` itself
(`write_sdxl`: model_index.json, two text encoders and tokenizers), `build_tiny_sd3` an SD3 one by
`StableDiffusion3Pipeline` (no T5); `TINY_BACKENDS` holds each under its `generate.backend`. `build_tiny_clip`
writes an open_clip architecture JSON plus a safetensors checkpoint. All are deterministic in `seed`, and for tests
and benchmarks only: their images and scores are noise.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
from collections.abc import Callable
from pathlib import Path

import open_clip
import torch
from diffusers import (
    AutoencoderKL,
    EulerAncestralDiscreteScheduler,
    EulerDiscreteScheduler,
    FlowMatchEulerDiscreteScheduler,
    SD3Transformer2DModel,
    StableDiffusion3Pipeline,
    StableDiffusionXLPipeline,
    UNet2DConditionModel,
)
from open_clip.tokenizer import bytes_to_unicode
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

from tasks.core.specs import ClipSpec, ModelSpec

TINY_IMAGE_SIZE = 32
TINY_CLIP_NAME = "cfgen-tiny-clip"
_TEXT_WIDTH = 32


def clip_bpe_tokenizer(pad: str = "<|endoftext|>") -> CLIPTokenizer:
    """The SD/OpenAI CLIP tokenizer (49408 tokens, 77 positions) rebuilt from open_clip's bundled BPE merges, padding
    with `pad` (SDXL's second tokenizer: "!")."""
    lines = gzip.decompress(importlib.resources.files("open_clip").joinpath("bpe_simple_vocab_16e6.txt.gz")
                            .read_bytes()).decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1:49152 - 256 - 2 + 1]]
    byte_chars = list(bytes_to_unicode().values())
    vocab = byte_chars + [c + "</w>" for c in byte_chars] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    return CLIPTokenizer(vocab={t: i for i, t in enumerate(vocab)}, merges=merges, model_max_length=77, pad_token=pad)


SD_BETAS = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1,
                timestep_spacing="leading")
TINY_UNET = dict(block_out_channels=(32, 64), layers_per_block=1, attention_head_dim=8,
                 down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))


def sd15_unet(width: int) -> dict:
    """SD v1.5's UNet block structure (4 levels, 2 layers each, cross-attention in the top 3, 8 heads) with
    `width` channels at the top level (SD v1.5: 320)."""
    return dict(block_out_channels=(width, 2 * width, 4 * width, 4 * width), layers_per_block=2,
                down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3, attention_head_dim=8)


TINY_SDXL_UNET = {"block_out_channels": (32, 64), "layers_per_block": 1, "attention_head_dim": (2, 4),
                  "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D"),
                  "up_block_types": ("CrossAttnUpBlock2D", "UpBlock2D"), "transformer_layers_per_block": (1, 2),
                  "use_linear_projection": True, "addition_embed_type": "text_time", "addition_time_embed_dim": 8}


def clip_text(width: int, layers: int, heads: int, act: str = "quick_gelu", projection: bool = False,
              pad: int = 49407) -> CLIPTextModel:
    """A random CLIP text encoder over the CLIP BPE vocabulary, 77 positions; `projection`: with its pooled
    projection (`CLIPTextModelWithProjection`, `width` wide)."""
    config = CLIPTextConfig(vocab_size=49408, hidden_size=width, intermediate_size=4 * width, num_hidden_layers=layers,
                            num_attention_heads=heads, max_position_embeddings=77, hidden_act=act,
                            projection_dim=width, bos_token_id=49406, eos_token_id=49407, pad_token_id=pad)
    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(config)


def write_sdxl(out_dir: Path, unet: UNet2DConditionModel, vae: AutoencoderKL, text_encoder: CLIPTextModel,
               text_encoder_2: CLIPTextModelWithProjection, zero_uncond: bool = True) -> ModelSpec:
    """Save an SDXL folder with `StableDiffusionXLPipeline.save_pretrained` (its real layout and model_index.json):
    the CLIP BPE tokenizers (the second padding with "!"), SDXL's Euler scheduler config, `zero_uncond` as
    `force_zeros_for_empty_prompt`."""
    StableDiffusionXLPipeline(
        vae=vae, text_encoder=text_encoder, text_encoder_2=text_encoder_2, tokenizer=clip_bpe_tokenizer(),
        tokenizer_2=clip_bpe_tokenizer("!"), unet=unet, scheduler=EulerDiscreteScheduler(**SD_BETAS),
        force_zeros_for_empty_prompt=zero_uncond,
    ).save_pretrained(out_dir)
    return ModelSpec(id=str(out_dir))


def build_tiny_sdxl(out_dir: Path, seed: int, zero_uncond: bool = True) -> ModelSpec:
    """Write a tiny SDXL folder (`write_sdxl`) to `out_dir`: two 2-layer text encoders 32 wide (context 64, pooled
    32), a 2-level UNet with SDXL's text-time embedding over 4x4 latents and the tiny 8x VAE; deterministic in
    `seed`. Use it with `vae=None`, `size=TINY_IMAGE_SIZE` or any multiple of 8."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        unet = UNet2DConditionModel(sample_size=TINY_IMAGE_SIZE // 8, cross_attention_dim=2 * _TEXT_WIDTH,
                                    projection_class_embeddings_input_dim=_TEXT_WIDTH + 6 * 8, **TINY_SDXL_UNET)
        vae = tiny_sd_modules(seed)[1]
        encoders = clip_text(_TEXT_WIDTH, 2, 4), clip_text(_TEXT_WIDTH, 2, 4, "gelu", projection=True, pad=0)
    return write_sdxl(Path(out_dir), unet, vae, *encoders, zero_uncond=zero_uncond)


def tiny_vae(latent_channels: int = 4, **config) -> AutoencoderKL:
    """A random 8x VAE a few channels wide (`config`: e.g. SD3's `shift_factor`, `scaling_factor`)."""
    return AutoencoderKL(block_out_channels=(8, 8, 8, 8), down_block_types=("DownEncoderBlock2D",) * 4,
                         up_block_types=("UpDecoderBlock2D",) * 4, latent_channels=latent_channels, norm_num_groups=4,
                         layers_per_block=1, sample_size=TINY_IMAGE_SIZE, **config)


def build_tiny_sd3(out_dir: Path, seed: int) -> ModelSpec:
    """Write a tiny SD3 folder with `StableDiffusion3Pipeline.save_pretrained` (its real layout and
    model_index.json), without T5 (text_encoder_3/ and tokenizer_3/ null: the pipeline's zeros): two CLIP text
    encoders with projections 32 wide (joint states 32, pooled 64), a 2-block MM-DiT (SD3.5's dual attention and q/k
    RMS norms in block 0) over 4x4x16 latents in 2x2 patches, a 16-channel 8x VAE with SD3's shift and scale, SD3's
    flow-matching scheduler (shift 3); deterministic in `seed`. Use it with `vae=None`, `size=TINY_IMAGE_SIZE`."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        transformer = SD3Transformer2DModel(
            sample_size=TINY_IMAGE_SIZE // 8, patch_size=2, in_channels=16, out_channels=16, num_layers=2,
            attention_head_dim=8, num_attention_heads=4, joint_attention_dim=_TEXT_WIDTH,
            caption_projection_dim=_TEXT_WIDTH, pooled_projection_dim=2 * _TEXT_WIDTH, pos_embed_max_size=8,
            dual_attention_layers=(0,), qk_norm="rms_norm")
        vae = tiny_vae(16, shift_factor=0.0609, scaling_factor=1.5305)
        encoders = clip_text(_TEXT_WIDTH, 2, 4, projection=True), clip_text(_TEXT_WIDTH, 2, 4, "gelu", True, pad=0)
    StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), vae=vae,
        text_encoder=encoders[0], tokenizer=clip_bpe_tokenizer(), text_encoder_2=encoders[1],
        tokenizer_2=clip_bpe_tokenizer("!"), text_encoder_3=None, tokenizer_3=None,
    ).save_pretrained(out_dir)
    return ModelSpec(id=str(out_dir))


def tiny_sd_modules(seed: int, unet: dict = TINY_UNET,
                    text_width: int = _TEXT_WIDTH) -> tuple[UNet2DConditionModel, AutoencoderKL, CLIPTextModel]:
    """The random networks of a tiny SD v1 model, seeded by `seed`: a UNet shaped by `unet` over 4x4 latents, an 8x
    VAE and a 2-layer CLIP text encoder whose states are `text_width` wide (SD v1.5: 768)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return (
            UNet2DConditionModel(sample_size=TINY_IMAGE_SIZE // 8, cross_attention_dim=text_width, **unet),
            tiny_vae(),
            CLIPTextModel(CLIPTextConfig(
                vocab_size=49408, hidden_size=text_width, intermediate_size=2 * text_width, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=77, bos_token_id=49406, eos_token_id=49407,
                pad_token_id=49407,
            )),
        )


def build_tiny_diffusion(out_dir: Path, seed: int, unet: dict = TINY_UNET, text_width: int = _TEXT_WIDTH) -> ModelSpec:
    """Write a tiny SD v1 folder to `out_dir` (its UNet shaped by `unet`, its text states `text_width` wide; SD v1.5:
    768); returns its spec (use it with `vae=None`, `size=TINY_IMAGE_SIZE` or any multiple of 8)."""
    out_dir = Path(out_dir)
    for name, module in zip(("unet", "vae", "text_encoder"), tiny_sd_modules(seed, unet, text_width)):
        module.save_pretrained(out_dir / name)
    clip_bpe_tokenizer().save_pretrained(out_dir / "tokenizer")
    EulerAncestralDiscreteScheduler(**SD_BETAS).save_pretrained(out_dir / "scheduler")
    return ModelSpec(id=str(out_dir))


TINY_BACKENDS: dict[str, Callable[[Path, int], ModelSpec]] = {  # `generate.backend` -> its tiny folder's builder
    "sd1": build_tiny_diffusion, "sdxl": build_tiny_sdxl, "sd3": build_tiny_sd3}


def build_tiny_clip(out_dir: Path, seed: int) -> ClipSpec:
    """Write `cfgen-tiny-clip.json` + a checkpoint to `out_dir`; returns the spec the real CLIP loader takes."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "embed_dim": 16,
        "vision_cfg": {"image_size": TINY_IMAGE_SIZE, "layers": 1, "width": 32, "head_width": 16, "patch_size": 8},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
    }
    config_path = out_dir / f"{TINY_CLIP_NAME}.json"
    config_path.write_text(json.dumps(config, indent=2))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = open_clip.CLIP(**config)
    checkpoint = out_dir / "tiny_clip.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(checkpoint))
    return ClipSpec(id=TINY_CLIP_NAME, pretrained=str(checkpoint), config=str(config_path))
