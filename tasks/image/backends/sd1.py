"""Stable Diffusion v1: one CLIP tokenizer and text encoder (77 tokens), a UNet conditioned on the encoder's states,
an 8x VAE, and the folder's Euler-ancestral ε-prediction scheduler. A sample's rows are
`[uncond·C_o, uncond·C_c, cond·C_o, cond·C_c]` (the o/c pair under classifier-free guidance). P2P shares
self-attention maps, and under `generate.p2p_tokens` the cross-attention maps of the tokens C_c shares with C_o
(`p2p.tokens`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from diffusers import AutoencoderKL, EulerAncestralDiscreteScheduler, UNet2DConditionModel
from transformers import CLIPTextModel, CLIPTokenizer

from tasks.core.loading import hub_kwargs, load_once, resolve_device, resolve_dtype
from tasks.core.specs import ModelSpec
from tasks.image import p2p
from tasks.image.params import GenerateParams
from tasks.image.sampling import ancestral_steps, compile_mode, compiled

if TYPE_CHECKING:
    from diffusers import ModelMixin
    from transformers import PreTrainedModel


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


@load_once
def load_tokenizer(spec: ModelSpec, subfolder: str = "tokenizer") -> CLIPTokenizer:
    """A tokenizer of the diffusion folder alone (cheap: prompt checks need no weights)."""
    return CLIPTokenizer.from_pretrained(spec.local(), subfolder=subfolder, **hub_kwargs(spec))


def token_counts(tokenizer: CLIPTokenizer, caption: str, counterfactual: str) -> tuple[tuple[int, int],
                                                                                   tuple[bool, bool]]:
    """Untruncated token counts of C_o and C_c, and whether each exceeds the tokenizer's limit (77 for SD)."""
    count_o, count_c = (len(ids) for ids in tokenizer([caption, counterfactual], verbose=False)["input_ids"])
    return (count_o, count_c), (count_o > tokenizer.model_max_length, count_c > tokenizer.model_max_length)


def clip_states(tokenizers: Sequence[CLIPTokenizer], encoders: Sequence[torch.nn.Module], texts: list[str],
                device: torch.device) -> tuple[list[torch.Tensor], torch.Tensor, list[Any]]:
    """What SDXL and SD3 condition on, per CLIP encoder: its input ids of `texts` (padded and truncated to 77
    tokens), and its outputs; with every encoder's penultimate states concatenated (len(texts), 77, sum of widths)."""
    ids = [tokenizer(texts, padding="max_length", truncation=True, max_length=tokenizer.model_max_length,
                     return_tensors="pt")["input_ids"] for tokenizer in tokenizers]
    outs = [encoder(one.to(device), output_hidden_states=True) for encoder, one in zip(encoders, ids)]
    return ids, torch.cat([out.hidden_states[-2] for out in outs], -1), outs


def latent_factor(vae: AutoencoderKL) -> int:
    """How many pixels a latent spans per side: 2 per VAE down block after the first (8 for SD's)."""
    return 2 ** (len(vae.config.block_out_channels) - 1)


class ClipBound:
    """A backend whose prompts are bound by the diffusion folder's CLIP tokenizer (77 tokens): `token_counts` from it
    alone, no weights loaded."""

    @classmethod
    def token_counts(cls, spec: ModelSpec, caption: str,
                     counterfactual: str) -> tuple[tuple[int, int], tuple[bool, bool]]:
        return token_counts(load_tokenizer(spec), caption, counterfactual)


@dataclass(frozen=True)
class SD1(ClipBound):
    """SD v1 components on one device/dtype, P2P processors installed in `unet` (compiled when `compile_mode` is
    set); `share_tokens`: sharing pairs also share the shared tokens' cross-attention maps."""

    tokenizer: CLIPTokenizer
    text_encoder: torch.nn.Module
    unet: torch.nn.Module
    vae: AutoencoderKL
    scheduler: EulerAncestralDiscreteScheduler
    compile_mode: str | None
    device: torch.device
    dtype: torch.dtype
    latent_channels: int
    latent_factor: int
    scaling_factor: float
    share_tokens: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)
    steps = staticmethod(ancestral_steps)

    @classmethod
    def assemble(cls, tokenizer: CLIPTokenizer, text_encoder: torch.nn.Module, unet: UNet2DConditionModel,
                 vae: AutoencoderKL, scheduler: EulerAncestralDiscreteScheduler, scaling_factor: float,
                 mode: str | None, device: torch.device, dtype: torch.dtype, share_tokens: bool = False) -> SD1:
        """Modules on `device` in eval mode as the backend: `unet` gets fused q·k·v projections and the P2P
        processors, then `torch.compile` in `mode` (None: eager)."""
        p2p.install(unet)
        return cls(tokenizer=tokenizer, text_encoder=text_encoder,
                   unet=compiled(unet, mode), vae=vae, scheduler=scheduler, compile_mode=mode, device=device,
                   dtype=dtype, latent_channels=unet.config.in_channels, latent_factor=latent_factor(vae),
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


def load_parts(spec: ModelSpec, vae: ModelSpec | None, channels_last: bool, encoders: dict[str, type[PreTrainedModel]],
               denoiser: tuple[str, type[ModelMixin]] = ("unet", UNet2DConditionModel),
               ) -> tuple[dict[str, ModelMixin | PreTrainedModel], torch.device, torch.dtype]:
    """The `denoiser` (subfolder, class), VAE (`vae` replaces the folder's vae/) and text `encoders` (subfolder ->
    class) of `spec`'s diffusers folder (id or path), on its device and dtype (fp32 on CPU: resolve_dtype) in eval
    mode; `channels_last` stores the denoiser's and VAE's convolutions NHWC."""
    path, device, kwargs = spec.local(), resolve_device(spec), hub_kwargs(spec)
    dtype = resolve_dtype(spec, device)
    if vae is None:
        vae_model = AutoencoderKL.from_pretrained(path, subfolder="vae", dtype=dtype, **kwargs)
    else:
        vae_model = AutoencoderKL.from_pretrained(vae.local(), dtype=dtype, **hub_kwargs(vae))
    folder, kind = denoiser
    unet = kind.from_pretrained(path, subfolder=folder, dtype=dtype, **kwargs)
    parts = {folder: unet, "vae": vae_model, **{name: model.from_pretrained(path, subfolder=name, dtype=dtype, **kwargs)
                                               for name, model in encoders.items()}}
    for module in parts.values():
        module.to(device).eval().requires_grad_(False)
    if channels_last:
        unet.to(memory_format=torch.channels_last)
        vae_model.to(memory_format=torch.channels_last)
    return parts, device, dtype


def model_index(spec: ModelSpec) -> dict:
    """The folder's model_index.json ({} without one: a hub id not yet fetched)."""
    index = Path(spec.local()) / "model_index.json"
    return json.loads(index.read_text()) if index.is_file() else {}


def load_scheduler(spec: ModelSpec) -> EulerAncestralDiscreteScheduler:
    """The folder's scheduler config as Euler-ancestral (`sampling.render` steps it)."""
    return EulerAncestralDiscreteScheduler.from_pretrained(spec.local(), subfolder="scheduler", **hub_kwargs(spec))


@load_once
def load_diffusion(spec: ModelSpec, vae: ModelSpec | None, channels_last: bool = False,
                   compile_unet: str = "off", share_tokens: bool = False) -> SD1:
    """Components from `spec`'s SD v1 folder (`load_parts`); `compile_unet` (`sampling.compile_mode`) wraps the UNet
    in `torch.compile`; `share_tokens`: `SD1.share_tokens`."""
    parts, device, dtype = load_parts(spec, vae, channels_last, {"text_encoder": CLIPTextModel})
    return SD1.assemble(load_tokenizer(spec), parts["text_encoder"], parts["unet"], parts["vae"], load_scheduler(spec),
                        parts["vae"].config.scaling_factor, compile_mode(compile_unet, device), device, dtype,
                        share_tokens)
