"""The miniature models' architectures, shared by the trainer (`train`) and the demo's model builder (`assemble`).

The toy-world weights are kept compact (`tasks/toyworld/weights/*.safetensors`, fp16): a text tower's 49,408-row token
embedding keeps only the rows of the world's tokens (`token_ids`), since no other token is ever trained; `expand`
puts them back into the full table (every other row zero) before a model is saved in the layout the pipeline loads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import open_clip
import torch
from diffusers import AutoencoderKL, EulerAncestralDiscreteScheduler, UNet2DConditionModel
from safetensors.torch import load_file, save_file
from transformers import CLIPTextConfig, CLIPTextModel, GPT2LMHeadModel, PreTrainedModel, RobertaForMaskedLM

from tasks.tiny.images import SD_BETAS, TINY_IMAGE_SIZE
from tasks.tiny.text import causal_lm, masked_lm
from tasks.toyworld.params import UNET_CHANNELS

TEXT_WIDTH = 64
VOCAB = 49408  # the CLIP BPE's tokens: every text tower's embedding rows
CLIP_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": TINY_IMAGE_SIZE, "layers": 2, "width": 64, "head_width": 16, "patch_size": 4},
    "text_cfg": {"context_length": 77, "vocab_size": VOCAB, "width": 64, "heads": 4, "layers": 2},
}
# The text LMs: (name, builder of its folder, class, shape).
LM_MAX_LENGTH = 32
LMS: tuple[tuple[str, Callable[..., None], type[PreTrainedModel], dict[str, int]], ...] = (
    ("mlm", masked_lm, RobertaForMaskedLM,
     {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}),
    ("clm", causal_lm, GPT2LMHeadModel, {"n_embd": 32, "n_layer": 2, "n_head": 2}))
# The token-embedding table of each compact state dict: its `token_ids` hold the rows it keeps.
EMBEDDINGS = {"text_encoder": "embeddings.token_embedding.weight", "clip": "token_embedding.weight"}


def diffusion_modules(attention_heads: int = 8) -> tuple[UNet2DConditionModel, AutoencoderKL, CLIPTextModel]:
    """SD v1 layout at 32 px: a 2x VAE (16x16x4 latents), a UNet with cross-attention at its 3 levels (16, 8, 4 px)
    of `attention_heads` heads each (diffusers' `attention_head_dim` is the number of heads), a 2-layer CLIP text
    encoder `TEXT_WIDTH` wide (random weights; `torch.manual_seed` first for a given init)."""
    vae = AutoencoderKL(block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4, norm_num_groups=8,
                        layers_per_block=1, sample_size=TINY_IMAGE_SIZE, mid_block_add_attention=False)
    unet = UNet2DConditionModel(
        sample_size=TINY_IMAGE_SIZE // 2, block_out_channels=UNET_CHANNELS, layers_per_block=1, norm_num_groups=8,
        down_block_types=("CrossAttnDownBlock2D",) * 3, up_block_types=("CrossAttnUpBlock2D",) * 3,
        cross_attention_dim=TEXT_WIDTH, attention_head_dim=attention_heads)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=VOCAB, hidden_size=TEXT_WIDTH, intermediate_size=2 * TEXT_WIDTH, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=77, bos_token_id=49406, eos_token_id=49407, pad_token_id=49407))
    return unet, vae, text_encoder


def scheduler(spacing: str) -> EulerAncestralDiscreteScheduler:
    """The toy world's sampler: SD v1's betas (and its Euler-ancestral steps) with the schedule's timestep spacing."""
    return EulerAncestralDiscreteScheduler(**SD_BETAS | {"timestep_spacing": spacing})


def clip_model() -> open_clip.CLIP:
    return open_clip.CLIP(**CLIP_CONFIG)


def half(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` in fp16 on the CPU, each tensor stored on its own (safetensors refuses shared storage)."""
    return {k: v.detach().half().cpu().contiguous() for k, v in state.items()}


def separate(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` as it is (dtype, values) on the CPU, each tensor stored on its own (tied weights untied)."""
    return {k: v.detach().cpu().clone().contiguous() for k, v in state.items()}


def full(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` in fp32 (a stored fp16 state, as modules load it)."""
    return {k: v.float() for k, v in state.items()}


def compact(state: dict[str, torch.Tensor], embedding: str, token_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """`state` in fp16 with only `token_ids`' rows of `embedding`."""
    table = state[embedding]
    return half({**state, embedding: table[token_ids.to(table.device)]}) | {"token_ids": token_ids}


def expand(state: dict[str, torch.Tensor], embedding: str) -> dict[str, torch.Tensor]:
    """The inverse of `compact` (in fp32): the full embedding table, zero where no token was kept."""
    out = full({k: v for k, v in state.items() if k != "token_ids"})
    table = torch.zeros(VOCAB, out[embedding].shape[1])
    table[state["token_ids"]] = out[embedding]
    out[embedding] = table
    return out


def save(path: Path, states: dict[str, dict[str, torch.Tensor]]) -> None:
    """One safetensors file of several prefixed state dicts."""
    save_file({f"{name}.{k}": v for name, state in states.items() for k, v in state.items()}, str(path))


def load(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    states: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in load_file(str(path)).items():
        name, _, rest = key.partition(".")
        states.setdefault(name, {})[rest] = value
    return states


