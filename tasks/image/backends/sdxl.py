"""Stable Diffusion XL: two CLIP text encoders (ViT-L and OpenCLIP bigG, 77 tokens each) whose penultimate states,
concatenated, are the UNet's cross-attention context, the second's pooled projection and the micro-conditioning
`time_ids` (original size, crop (0, 0), target size: `generate.size` square) its added embeddings, an 8x VAE, and
the folder's scheduler config stepped as Euler-ancestral ε-prediction — as `StableDiffusionXLPipeline` conditions
it. Rows are SD v1's (`[uncond·C_o, uncond·C_c, cond·C_o, cond·C_c]` per sample, classifier-free guidance); P2P
shares self-attention maps and the cross-attention maps of the tokens C_c shares with C_o (`p2p.tokens`; the
unconditional pair's prompts are one prompt: every token). The unconditional prompt is zeros when the folder's
model_index.json sets `force_zeros_for_empty_prompt` (the pipeline's default; SDXL 1.0 base sets it), else "" encoded;
an fp16 VAE whose config sets `force_upcast` decodes in fp32 (sdxl-vae-fp16-fix does not need it)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from diffusers import EulerAncestralDiscreteScheduler
from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

from tasks.core.loading import compiled, load_once
from tasks.core.specs import ModelSpec
from tasks.image import p2p
from tasks.image.backends.clip import (ClipBackend, clip_states, latent_factor, load_parts, load_scheduler,
                                       load_tokenizer, model_index, token_counts)
from tasks.image.params import GenerateParams
from tasks.image.sampling import ancestral_steps, compile_mode


@dataclass(frozen=True)
class Prompts:
    """`[uncond, C_o, C_c]`: both encoders' penultimate states concatenated (3, 77, D) and encoder 2's pooled
    projection (3, P); `columns`: `p2p.tokens` of C_o and C_c (77,); per caption: untruncated token count,
    truncated?"""

    states: torch.Tensor
    pooled: torch.Tensor
    columns: torch.Tensor
    token_counts: tuple[int, int]
    truncated: tuple[bool, bool]


@dataclass(frozen=True)
class Conditioning:
    """The UNet inputs of a render's rows besides latents and timestep; `columns` per row pair."""

    states: torch.Tensor
    added: dict[str, torch.Tensor]
    columns: torch.Tensor


@dataclass(frozen=True)
class SDXL(ClipBackend):
    """SDXL components, P2P processors installed in `unet` (compiled when `compile_mode` is set); `zero_uncond`: the
    folder's `force_zeros_for_empty_prompt`. Both tokenizers are one BPE of 77 tokens."""

    tokenizers: tuple[CLIPTokenizer, CLIPTokenizer]
    text_encoders: tuple[torch.nn.Module, torch.nn.Module]
    unet: torch.nn.Module
    zero_uncond: bool
    steps = staticmethod(ancestral_steps)

    @classmethod
    def load(cls, params: GenerateParams) -> SDXL:
        return load_diffusion(params.diffusion, params.vae, params.channels_last, params.compile_unet)

    @property
    def denoiser(self) -> torch.nn.Module:
        return self.unet

    @torch.inference_mode()
    def encode(self, caption: str, counterfactual: str) -> Prompts:
        """Prompts longer than 77 tokens are truncated and flagged."""
        ids, states, outs = clip_states(self.tokenizers, self.text_encoders, ["", caption, counterfactual],
                                        self.device)
        pooled = outs[-1].text_embeds
        if self.zero_uncond:
            states[0], pooled[0] = 0, 0
        counts, truncated = token_counts(self.tokenizers[0], caption, counterfactual)
        columns = torch.tensor(p2p.tokens(ids[0][1].tolist(), ids[0][2].tolist(), counts), device=self.device)
        return Prompts(states, pooled, columns, counts, truncated)

    def condition(self, prompts: Prompts, n: int, size: int) -> Conditioning:
        """`n` samples' rows `[uncond, uncond, C_o, C_c]`, each with the time ids of a `size` square image."""
        rows = torch.tensor([0, 0, 1, 2], device=self.device).repeat(n)
        time_ids = torch.tensor([[size, size, 0, 0, size, size]], device=self.device, dtype=self.dtype)
        return Conditioning(prompts.states[rows], {"text_embeds": prompts.pooled[rows],
                                                   "time_ids": time_ids.expand(len(rows), -1)},
                            p2p.pair_columns(prompts.columns, n))

    def denoise(self, rows: torch.Tensor, t: torch.Tensor, conditioning: Conditioning,
                shared: torch.Tensor | None) -> torch.Tensor:
        return self.unet(rows, t, encoder_hidden_states=conditioning.states, added_cond_kwargs=conditioning.added,
                         cross_attention_kwargs={"p2p_shared": shared, "p2p_tokens": conditioning.columns}).sample

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        vae = self.vae
        return vae.decode(latents.to(vae.dtype) / vae.config.scaling_factor).sample


def zeros_for_empty_prompt(spec: ModelSpec) -> bool:
    """model_index.json's `force_zeros_for_empty_prompt` (True without one or the key, as the pipeline's default)."""
    return model_index(spec).get("force_zeros_for_empty_prompt", True)


@load_once
def load_diffusion(spec: ModelSpec, vae: ModelSpec | None, channels_last: bool = False,
                   compile_unet: str = "off") -> SDXL:
    """Components from `spec`'s SDXL folder (`clip.load_parts`): the UNet gets fused q·k·v projections and the P2P
    processors, then `torch.compile` in the `compile_unet` mode (`sampling.compile_mode`)."""
    parts, device, dtype = load_parts(spec, vae, channels_last, {"text_encoder": CLIPTextModel,
                                                                "text_encoder_2": CLIPTextModelWithProjection})
    unet, vae_model = parts["unet"], parts["vae"]
    if dtype == torch.float16 and vae_model.config.force_upcast:
        vae_model.to(torch.float32)
    p2p.install(unet)
    mode = compile_mode(compile_unet, device)
    return SDXL(tokenizers=(load_tokenizer(spec), load_tokenizer(spec, "tokenizer_2")),
                text_encoders=(parts["text_encoder"], parts["text_encoder_2"]),
                unet=compiled(unet, mode), zero_uncond=zeros_for_empty_prompt(spec), vae=vae_model,
                scheduler=load_scheduler(spec, EulerAncestralDiscreteScheduler), compile_mode=mode, device=device,
                dtype=dtype, latent_channels=unet.config.in_channels, latent_factor=latent_factor(vae_model))
