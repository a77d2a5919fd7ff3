"""Paired Stable Diffusion sampling: (I_o, I_c) per seed with Euler-ancestral steps and Prompt-to-Prompt sharing.

Per sample: two generators seeded identically (one per image) draw the initial latent and the ancestral noise of
every step in lockstep, so both images start from the same latent and get the same noise; classifier-free guidance
uses the sample's own scale. A sample's rows never mix with another sample's (P2P pairs rows within a sample only),
but batched kernels may round differently for different batch sizes: `render` of a batch of one is the canonical,
reproducible path (same device, dtype, compile mode and software stack => same pixels).

The render loop does no host work per step: the P2P sharing schedule and every step's ancestral noise (drawn from each
sample's generators in the scheduler's order, so the pixels are the scheduler's) exist before the first UNet call,
and each step is the scheduler's Euler-ancestral update on tensors (`AncestralStep`), so a compiled UNet's CUDA graph
replays back to back.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from diffusers import AutoencoderKL, EulerAncestralDiscreteScheduler, UNet2DConditionModel
from diffusers.utils.torch_utils import randn_tensor
from transformers import CLIPTextModel, CLIPTokenizer

from tasks.core.loading import hub_kwargs, load_once, resolve_device, resolve_dtype
from tasks.core.specs import ModelSpec
from tasks.image import p2p
from tasks.image.params import GenerateParams


@dataclass(frozen=True)
class Diffusion:
    """SD v1 components on one device/dtype, P2P processors installed in `unet` (compiled when `compile_mode` is set);
    `lock` serialises the renders of every thread that shares these components (a Dask worker's threads): one batch
    at a time on the device, as a compiled UNet's CUDA graphs (static buffers, replayed in order) require."""

    tokenizer: CLIPTokenizer
    text_encoder: torch.nn.Module
    unet: torch.nn.Module
    vae: torch.nn.Module
    scheduler: EulerAncestralDiscreteScheduler
    compile_mode: str | None
    device: torch.device
    dtype: torch.dtype
    latent_channels: int
    latent_factor: int
    scaling_factor: float
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)


@dataclass(frozen=True)
class Sample:
    seed: int
    p2p_fraction: float
    guidance_scale: float


def sample_seed(seed: int, caption_id: str, index: int) -> int:
    """A 63-bit seed from blake2b of (global seed, pair id, sample index): stable across processes and machines."""
    digest = hashlib.blake2b(json.dumps([seed, caption_id, index]).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def plan_sample(params: GenerateParams, caption_id: str, index: int) -> Sample:
    """Sample `index` of a pair: its seed, then guidance scale and p2p fraction drawn in that order from the seed."""
    seed = sample_seed(params.seed, caption_id, index)
    rng = random.Random(seed)
    guidance = rng.uniform(*params.guidance_scale)
    return Sample(seed, p2p_fraction=rng.uniform(*params.p2p_fraction), guidance_scale=guidance)


@dataclass(frozen=True)
class Prompts:
    """Text-encoder states `[uncond, C_o, C_c]` (3, 77, D); per caption: its untruncated token count, truncated?"""

    states: torch.Tensor
    token_counts: tuple[int, int]
    truncated: tuple[bool, bool]


@dataclass(frozen=True)
class Rendered:
    """`images[s, b]` HxWx3 uint8 (b: 0 = I_o, 1 = I_c); `finite[s]` False when either decoded image had NaN/inf."""

    images: np.ndarray
    finite: np.ndarray


@load_once
def load_tokenizer(spec: ModelSpec) -> CLIPTokenizer:
    """The diffusion folder's tokenizer alone (cheap: prompt checks need no weights)."""
    return CLIPTokenizer.from_pretrained(spec.local(), subfolder="tokenizer", **hub_kwargs(spec))


def compile_mode(setting: str, device: torch.device) -> str | None:
    """`torch.compile` mode of the UNet for `generate.compile_unet`: `auto` is reduce-overhead (CUDA graphs) on CUDA
    and eager elsewhere, `off` eager."""
    if setting == "auto":
        return "reduce-overhead" if device.type == "cuda" else None
    return None if setting == "off" else setting


@load_once
def load_diffusion(spec: ModelSpec, vae: ModelSpec | None, channels_last: bool = False,
                   compile_unet: str = "off") -> Diffusion:
    """Components from `spec`'s SD v1 folder (id or path); `vae` replaces its vae/. fp32 on CPU (resolve_dtype).
    The UNet gets fused q·k·v projections and the P2P processors; `channels_last` stores the UNet and VAE
    convolutions NHWC; `compile_unet` (`compile_mode`) wraps the UNet in `torch.compile`."""
    path, device, kwargs = spec.local(), resolve_device(spec), hub_kwargs(spec)
    dtype = resolve_dtype(spec, device)
    if vae is None:
        vae_model = AutoencoderKL.from_pretrained(path, subfolder="vae", dtype=dtype, **kwargs)
    else:
        vae_model = AutoencoderKL.from_pretrained(vae.local(), dtype=dtype, **hub_kwargs(vae))
    unet = UNet2DConditionModel.from_pretrained(path, subfolder="unet", dtype=dtype, **kwargs)
    text_encoder = CLIPTextModel.from_pretrained(path, subfolder="text_encoder", dtype=dtype, **kwargs)
    for module in (unet, vae_model, text_encoder):
        module.to(device).eval().requires_grad_(False)
    if channels_last:
        unet.to(memory_format=torch.channels_last)
        vae_model.to(memory_format=torch.channels_last)
    p2p.install(unet)
    mode = compile_mode(compile_unet, device)
    return Diffusion(
        tokenizer=load_tokenizer(spec), text_encoder=text_encoder,
        unet=unet if mode is None else torch.compile(unet, mode=mode), vae=vae_model,
        scheduler=EulerAncestralDiscreteScheduler.from_pretrained(path, subfolder="scheduler", **kwargs),
        compile_mode=mode, device=device, dtype=dtype,
        latent_channels=unet.config.in_channels, latent_factor=2 ** (len(vae_model.config.block_out_channels) - 1),
        scaling_factor=vae_model.config.scaling_factor)


def token_counts(tokenizer: CLIPTokenizer, caption: str, counterfactual: str) -> tuple[tuple[int, int],
                                                                                   tuple[bool, bool]]:
    """Untruncated token counts of C_o and C_c, and whether each exceeds the tokenizer's limit (77 for SD)."""
    counts = tuple(len(ids) for ids in tokenizer([caption, counterfactual], verbose=False)["input_ids"])
    return counts, tuple(n > tokenizer.model_max_length for n in counts)


@torch.inference_mode()
def encode_prompts(diffusion: Diffusion, caption: str, counterfactual: str) -> Prompts:
    """Prompts longer than the tokenizer's limit (77 for SD) are truncated and flagged."""
    tokenizer = diffusion.tokenizer
    ids = tokenizer(["", caption, counterfactual], padding="max_length", max_length=tokenizer.model_max_length,
                    truncation=True, return_tensors="pt")["input_ids"]
    states = diffusion.text_encoder(ids.to(diffusion.device))[0]
    return Prompts(states, *token_counts(tokenizer, caption, counterfactual))


@dataclass(frozen=True)
class AncestralStep:
    """One step of `EulerAncestralDiscreteScheduler` (epsilon prediction) with its noise given, computed with the
    scheduler's own operations in its order (0-d CPU tensors: scalars to a kernel, never copied), so a render equals
    one stepped by `scheduler.step` bit for bit."""

    sigma: torch.Tensor
    sigma_to: torch.Tensor

    def scale_input(self, sample: torch.Tensor) -> torch.Tensor:
        return sample / ((self.sigma ** 2 + 1) ** 0.5)

    def __call__(self, eps: torch.Tensor, sample: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        sigma, sigma_to = self.sigma, self.sigma_to
        sample = sample.to(torch.float32)
        pred_original_sample = sample - sigma * eps
        sigma_up = (sigma_to ** 2 * (sigma ** 2 - sigma_to ** 2) / sigma ** 2) ** 0.5
        sigma_down = (sigma_to ** 2 - sigma_up ** 2) ** 0.5
        derivative = (sample - pred_original_sample) / sigma
        prev_sample = sample + derivative * (sigma_down - sigma)
        return (prev_sample + noise * sigma_up).to(eps.dtype)


def ancestral_steps(scheduler: EulerAncestralDiscreteScheduler) -> list[AncestralStep]:
    """The steps of a scheduler after `set_timesteps`, in order."""
    if scheduler.config.prediction_type != "epsilon":
        raise ValueError(f"the diffusion scheduler predicts {scheduler.config.prediction_type!r}: only epsilon runs")
    sigmas = scheduler.sigmas.cpu()
    return [AncestralStep(sigmas[i], sigmas[i + 1]) for i in range(len(scheduler.timesteps))]


@torch.inference_mode()
def render(diffusion: Diffusion, prompts: Prompts, samples: Sequence[Sample], steps: int, size: int) -> Rendered:
    """Denoise S samples in UNet batches of 4S rows (`[uncond·C_o, uncond·C_c, cond·C_o, cond·C_c]` per sample)."""
    n, device, dtype = len(samples), diffusion.device, diffusion.dtype
    scheduler = EulerAncestralDiscreteScheduler.from_config(diffusion.scheduler.config)
    scheduler.set_timesteps(steps, device=device)
    generators = [torch.Generator(device).manual_seed(s.seed) for s in samples for _ in range(2)]
    if size % diffusion.latent_factor:
        raise ValueError(f"generate.size={size} is not a multiple of the VAE factor {diffusion.latent_factor}")
    side = size // diffusion.latent_factor
    shape = (2 * n, diffusion.latent_channels, side, side)
    latents = randn_tensor(shape, generator=generators, device=device, dtype=dtype) * scheduler.init_noise_sigma
    noise = [randn_tensor(shape, generator=generators, device=device, dtype=dtype) for _ in range(steps)]
    shared = p2p.schedule([s.p2p_fraction for s in samples], steps, device)
    uncond, cond_o, cond_c = prompts.states
    context = torch.stack([uncond, uncond, cond_o, cond_c]).repeat(n, 1, 1)
    scales = torch.tensor([s.guidance_scale for s in samples], device=device, dtype=dtype).view(n, 1, 1, 1, 1)
    with diffusion.lock:
        for i, (t, step) in enumerate(zip(scheduler.timesteps, ancestral_steps(scheduler))):
            x = step.scale_input(latents).unflatten(0, (n, 1, 2)).expand(-1, 2, -1, -1, -1, -1)
            eps = diffusion.unet(x.flatten(0, 2), t, encoder_hidden_states=context,
                                 cross_attention_kwargs={"p2p_shared": shared[i]}).sample.unflatten(0, (n, 2, 2))
            eps = (eps[:, 0] + scales * (eps[:, 1] - eps[:, 0])).flatten(0, 1).to(latents.dtype)
            latents = step(eps, latents, noise[i])
    decoded = diffusion.vae.decode(latents / diffusion.scaling_factor).sample.float()
    finite = torch.isfinite(decoded).flatten(1).all(1).view(n, 2).all(1)
    pixels = (decoded.nan_to_num(0.0) / 2 + 0.5).clamp(0, 1).mul(255).round().to(torch.uint8)
    images = pixels.permute(0, 2, 3, 1).unflatten(0, (n, 2)).cpu().numpy()
    return Rendered(images, finite.cpu().numpy())
