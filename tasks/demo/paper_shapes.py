"""Random-weight stand-ins of every paper-profile model at its exact published shape, in the layout its real id
loads from: the same FLOPs, tensor shapes, dtypes and loading code as the paper's run, noise for outputs.

- `stable-diffusion-v1-5`: UNet (320/640/1280/1280, 768-wide cross-attention), its VAE, the CLIP ViT-L/14 text
  encoder, the real CLIP BPE tokenizer (`tasks.tiny.images.clip_bpe_tokenizer`) and its PNDM scheduler config;
- `sd-vae-ft-mse`: the replacement VAE (same network, sample size 256);
- `stable-diffusion-xl-base-1.0` (not in `build`: the SDXL rehearsal, `benchmarks/sdxl_rehearsal.py`, writes it):
  `build_sdxl_base`, in `StableDiffusionXLPipeline`'s layout;
- open_clip `ViT-L-14` and `ViT-B-32` checkpoints;
- `roberta-base` and `gpt2-large` with a byte-level BPE trained on the given captions; the vocabulary stays at the
  published size (50,265 / 50,257) and ids past the trained tokenizer get a -1e4 MLM bias, so no fill names a token
  the tokenizer lacks.

Weights are stored in float16 (half the disk; every loader casts to the dtype its spec asks for). `build` writes each
model once: a folder whose `.complete` marker names the same inputs (the captions, for the text models) is reused.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import open_clip
import torch
from diffusers import AutoencoderKL, PNDMScheduler, UNet2DConditionModel
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

from tasks.tiny.images import SD_BETAS, clip_bpe_tokenizer, sd15_unet, write_sdxl
from tasks.tiny.text import causal_lm, masked_lm, train_vocab

ROBERTA_VOCAB, GPT2_VOCAB = 50265, 50257
OPEN_CLIP = {"clip_l14": "ViT-L-14", "clip_b32": "ViT-B-32"}
SD15_TEXT = CLIPTextConfig(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                           num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu",
                           projection_dim=768, bos_token_id=49406, eos_token_id=49407, pad_token_id=49407)

# SDXL 1.0 base (stabilityai/stable-diffusion-xl-base-1.0): its UNet's config (2.567 B parameters) and its second
# text encoder, OpenCLIP ViT-bigG/14's text tower (its first is SD15_TEXT, CLIP ViT-L/14's)
SDXL_UNET = {"sample_size": 128, "block_out_channels": (320, 640, 1280), "layers_per_block": 2,
             "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
             "up_block_types": ("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
             "transformer_layers_per_block": (1, 2, 10), "attention_head_dim": (5, 10, 20),
             "use_linear_projection": True, "cross_attention_dim": 2048, "addition_embed_type": "text_time",
             "addition_time_embed_dim": 256, "projection_class_embeddings_input_dim": 2816}
SDXL_TEXT_2 = CLIPTextConfig(vocab_size=49408, hidden_size=1280, intermediate_size=5120, num_hidden_layers=32,
                             num_attention_heads=20, max_position_embeddings=77, hidden_act="gelu", projection_dim=1280,
                             bos_token_id=49406, eos_token_id=49407, pad_token_id=0)


def sd_vae(sample_size: int, **config) -> AutoencoderKL:
    """The SD v1 VAE (sd-vae-ft-mse has the same network, configured with sample size 256; SDXL's too, with its
    `config`)."""
    return AutoencoderKL(block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
                         up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=2, latent_channels=4,
                         norm_num_groups=32, sample_size=sample_size, **config)


def build_sdxl_base(out: Path) -> None:
    """SDXL 1.0 base at its published shapes (`write_sdxl`: zero unconditional embeddings), built one network at a
    time in float32 and stored in float16; its VAE is SDXL's (scaling factor 0.13025, sample size 1024, force_upcast
    as the original)."""
    write_sdxl(out, UNet2DConditionModel(**SDXL_UNET).half(), sd_vae(1024, scaling_factor=0.13025).half(),
               CLIPTextModel(SD15_TEXT).half(), CLIPTextModelWithProjection(SDXL_TEXT_2).half())


def build_sd15(out: Path) -> None:
    UNet2DConditionModel(sample_size=64, cross_attention_dim=768, **sd15_unet(320)).half().save_pretrained(
        out / "unet")
    sd_vae(512).half().save_pretrained(out / "vae")
    CLIPTextModel(SD15_TEXT).half().save_pretrained(out / "text_encoder")
    clip_bpe_tokenizer().save_pretrained(out / "tokenizer")
    PNDMScheduler(**SD_BETAS, skip_prk_steps=True).save_pretrained(out / "scheduler")


def build_sd_vae_ft_mse(out: Path) -> None:
    sd_vae(256).half().save_pretrained(out)


def build_open_clip(name: str) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        model = open_clip.create_model(name)
        out.mkdir(parents=True)
        save_file({k: v.half().contiguous() for k, v in model.state_dict().items()}, str(out / "open_clip.safetensors"))

    return build


def build_text(model: Callable[..., None], captions: list[str], vocab_size: int, max_length: int,
               **shape) -> Callable[[Path], None]:
    """A `tasks.tiny.text` builder at a published shape: its BPE trained on `captions`, the vocabulary padded to
    `vocab_size`, stored in float16."""
    def build(out: Path) -> None:
        vocab, merges = train_vocab(captions, out / "bpe", vocab_size)
        model(vocab, merges, out, max_length, vocab_size, torch.float16, **shape)
        shutil.rmtree(out / "bpe")

    return build


def build(out: Path, captions: list[str], seed: int = 0) -> dict[str, Path]:
    """Every stand-in under `out` (name -> folder), building only those not complete yet."""
    text = hashlib.sha256("\n".join(captions).encode()).hexdigest()
    builders = {"stable-diffusion-v1-5": (build_sd15, ""), "sd-vae-ft-mse": (build_sd_vae_ft_mse, ""),
                **{name: (build_open_clip(arch), "") for name, arch in OPEN_CLIP.items()},
                "roberta-base": (build_text(masked_lm, captions, ROBERTA_VOCAB, 512), text),
                "gpt2-large": (build_text(causal_lm, captions, GPT2_VOCAB, 1024, n_embd=1280, n_layer=36, n_head=20),
                               text)}
    folders = {}
    for name, (builder, inputs) in builders.items():
        folder, marker = out / name, out / name / ".complete"
        folders[name] = folder
        if not marker.is_file() or marker.read_text() != f"{seed} {inputs}":
            shutil.rmtree(folder, ignore_errors=True)
            with torch.random.fork_rng():
                torch.manual_seed(seed)
                builder(folder)
            marker.write_text(f"{seed} {inputs}")
    return folders
