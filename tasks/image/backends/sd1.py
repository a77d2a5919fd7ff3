"""Stable Diffusion v1: one CLIP tokenizer and text encoder (77 tokens), a UNet conditioned on the encoder's states,
an 8x VAE, and the folder's Euler-ancestral ε-prediction scheduler. A sample's rows are
`[uncond·C_o, uncond·C_c, cond·C_o, cond·C_c]` (the o/c pair under classifier-free guidance). P2P shares
self-attention maps, and under `generate.p2p_tokens` the cross-attention maps of the tokens C_c shares with C_o
(`p2p.tokens`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from diffusers import AutoencoderKL, EulerAncestralDiscreteScheduler, UNet2DConditionModel
from transformers import CLIPTextModel, CLIPTokenizer

from tasks.core.loading import compiled, load_once
from tasks.core.specs import ModelSpec
from tasks.image import p2p
from tasks.image.backends.clip import (ClipBackend, latent_factor, load_parts, load_scheduler, load_tokenizer,
                                       token_counts)
from tasks.image.params import GenerateParams
from tasks.image.sampling import ancestral_steps, compile_mode


@dataclass(frozen=True)
class Prompts:
    """Text-encoder states `[uncond, C_o, C_c]` (3, 77, D); `columns`: `p2p.tokens` of C_o and C_c (77,), None
    when cross-attention runs stock; per caption: its untruncated token count, truncated?"""

    states: torch.Tensor
    columns: torch.Tensor | None
    token_counts: tuple[int, int]
    truncated: tuple[bool, bool]


@dataclass(frozen=True)
class Conditioning:
    """The UNet inputs of a render's rows besides latents and timestep; `columns` per row pair (None: stock)."""

    states: torch.Tensor
    columns: torch.Tensor | None


@dataclass(frozen=True)
class SD1(ClipBackend):
    """SD v1 components, P2P processors installed in `unet` (compiled when `compile_mode` is set); `share_tokens`:
    sharing pairs also share the shared tokens' cross-attention maps."""

    tokenizer: CLIPTokenizer
    text_encoder: torch.nn.Module
    unet: torch.nn.Module
    scaling_factor: float
    share_tokens: bool = False
    steps = staticmethod(ancestral_steps)

    @classmethod
    def assemble(cls, tokenizer: CLIPTokenizer, text_encoder: torch.nn.Module, unet: UNet2DConditionModel,
                 vae: AutoencoderKL, scheduler: EulerAncestralDiscreteScheduler, scaling_factor: float,
                 mode: str | None, device: torch.device, dtype: torch.dtype, share_tokens: bool = False) -> SD1:
        """Modules on `device` in eval mode as the backend: `unet` gets fused q·k·v projections and the P2P
        processors, then `torch.compile` in `mode` (None: eager)."""
        p2p.install(unet)
        return cls(tokenizer=tokenizer, text_encoder=text_encoder, unet=compiled(unet, mode), vae=vae,
                   scheduler=scheduler, compile_mode=mode, device=device, dtype=dtype,
                   latent_channels=unet.config.in_channels, latent_factor=latent_factor(vae),
                   scaling_factor=scaling_factor, share_tokens=share_tokens)

    @classmethod
    def load(cls, params: GenerateParams) -> SD1:
        return load_diffusion(params.diffusion, params.vae, params.channels_last, params.compile_unet,
                              params.p2p_tokens)

    @property
    def denoiser(self) -> torch.nn.Module:
        return self.unet

    @torch.inference_mode()
    def encode(self, caption: str, counterfactual: str) -> Prompts:
        """Prompts longer than the tokenizer's limit (77 for SD) are truncated and flagged."""
        tokenizer = self.tokenizer
        ids = tokenizer(["", caption, counterfactual], padding="max_length", max_length=tokenizer.model_max_length,
                        truncation=True, return_tensors="pt")["input_ids"]
        states = self.text_encoder(ids.to(self.device))[0]
        counts, truncated = token_counts(tokenizer, caption, counterfactual)
        columns = torch.tensor(p2p.tokens(ids[1].tolist(), ids[2].tolist(), counts), device=self.device) if (
            self.share_tokens) else None
        return Prompts(states, columns, counts, truncated)

    def condition(self, prompts: Prompts, n: int, size: int) -> Conditioning:
        """The encoder states of `n` samples' rows, `[uncond, uncond, C_o, C_c]` each (any size)."""
        uncond, cond_o, cond_c = prompts.states
        columns = None if prompts.columns is None else p2p.pair_columns(prompts.columns, n)
        return Conditioning(torch.stack([uncond, uncond, cond_o, cond_c]).repeat(n, 1, 1), columns)

    def denoise(self, rows: torch.Tensor, t: torch.Tensor, conditioning: Conditioning,
                shared: torch.Tensor | None) -> torch.Tensor:
        return self.unet(rows, t, encoder_hidden_states=conditioning.states,
                         cross_attention_kwargs={"p2p_shared": shared, "p2p_tokens": conditioning.columns}).sample

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return self.vae.decode(latents / self.scaling_factor).sample


@load_once
def load_diffusion(spec: ModelSpec, vae: ModelSpec | None, channels_last: bool = False,
                   compile_unet: str = "off", share_tokens: bool = False) -> SD1:
    """Components from `spec`'s SD v1 folder (`clip.load_parts`); `compile_unet` (`sampling.compile_mode`) wraps the
    UNet in `torch.compile`; `share_tokens`: `SD1.share_tokens`."""
    parts, device, dtype = load_parts(spec, vae, channels_last, {"text_encoder": CLIPTextModel})
    return SD1.assemble(load_tokenizer(spec), parts["text_encoder"], parts["unet"], parts["vae"],
                        load_scheduler(spec, EulerAncestralDiscreteScheduler), parts["vae"].config.scaling_factor,
                        compile_mode(compile_unet, device), device, dtype, share_tokens)
