"""Paired sampling: (I_o, I_c) per seed with Prompt-to-Prompt sharing, on any image backend (`backends.Diffusion`:
it encodes the prompts, conditions and runs the denoiser, decodes), stepped as the backend's `steps` directs:
Euler-ancestral ε-prediction (SD v1, SDXL: `ancestral_steps`) or flow-matching Euler (SD3: `flow_steps`, no noise
after the initial latent).

Per sample: two generators seeded identically (one per image) draw the initial latent and the ancestral noise of every
step in lockstep, so both images start from the same latent and get the same noise; classifier-free guidance uses the
sample's own scale. A sample's rows never mix with another sample's (P2P pairs rows within a sample only), and on CPU a
sample's pixels are the same in any batch under 4 samples (under 16 denoiser rows; products of few rows padded:
`invariant_products`; oneDNN off: `thread_invariant_convolutions`; torch's own convolutions take another path from 16
rows, which is why the demo renders one sample a batch); GPU kernels may round differently for different batch sizes,
so `render` of a batch of one is the canonical, reproducible path (same device, dtype, compile mode and software stack
=> same pixels).

The render loop does no host work per step: the P2P sharing schedule, the conditioning and every step's ancestral
noise (drawn from each sample's generators in the scheduler's order, so the pixels are the scheduler's) exist before
the first denoiser call, and each step is the scheduler's update on tensors (`AncestralStep`, `FlowStep`), so a
compiled denoiser's CUDA graph replays back to back.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from diffusers import EulerAncestralDiscreteScheduler, FlowMatchEulerDiscreteScheduler
from diffusers.utils.torch_utils import randn_tensor

from tasks.core.batches import invariant_products
from tasks.core.loading import thread_invariant_convolutions
from tasks.image import p2p
from tasks.image.params import GenerateParams

if TYPE_CHECKING:
    from tasks.image.backends import Diffusion


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
class Rendered:
    """`images[s, b]` HxWx3 uint8 (b: 0 = I_o, 1 = I_c); `finite[s]` False when either decoded image had NaN/inf."""

    images: np.ndarray
    finite: np.ndarray


def compile_mode(setting: str, device: torch.device) -> str | None:
    """`torch.compile` mode of the denoiser for `generate.compile_unet`: `auto` is reduce-overhead (CUDA graphs) on CUDA
    and eager elsewhere, `off` eager."""
    if setting == "auto":
        return "reduce-overhead" if device.type == "cuda" else None
    return None if setting == "off" else setting


@dataclass(frozen=True)
class AncestralStep:
    """One step of `EulerAncestralDiscreteScheduler` (epsilon prediction) with its noise given, computed with the
    scheduler's own operations in its order (0-d CPU tensors: scalars to a kernel, never copied), so a render equals
    one stepped by `scheduler.step` bit for bit."""

    sigma: torch.Tensor
    sigma_to: torch.Tensor
    noisy = True  # takes noise drawn for it

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


@dataclass(frozen=True)
class FlowStep:
    """One step of `FlowMatchEulerDiscreteScheduler` (velocity prediction, deterministic): `x + (σ_next − σ)·v` in
    float32 with the scheduler's operations in its order, so a render equals one stepped by `scheduler.step` bit for
    bit; the denoiser's input is the latent itself."""

    sigma: torch.Tensor
    sigma_to: torch.Tensor
    noisy = False

    def scale_input(self, sample: torch.Tensor) -> torch.Tensor:
        return sample

    def __call__(self, velocity: torch.Tensor, sample: torch.Tensor, noise: None = None) -> torch.Tensor:
        return (sample.to(torch.float32) + (self.sigma_to - self.sigma) * velocity).to(velocity.dtype)


def flow_steps(scheduler: FlowMatchEulerDiscreteScheduler) -> list[FlowStep]:
    """The steps of a scheduler after `set_timesteps` (its `shift` applied there), in order."""
    if scheduler.config.stochastic_sampling or scheduler.config.use_dynamic_shifting:
        raise ValueError("the flow-matching scheduler samples stochastically or shifts dynamically: neither runs")
    sigmas = scheduler.sigmas.cpu()
    return [FlowStep(sigmas[i], sigmas[i + 1]) for i in range(len(scheduler.timesteps))]


@torch.inference_mode()
def render(diffusion: Diffusion, prompts: Any, samples: Sequence[Sample], steps: int, size: int) -> Rendered:
    """Denoise S samples (`prompts`: the backend's `encode`) in denoiser batches of 4S rows
    (`[uncond·C_o, uncond·C_c, cond·C_o, cond·C_c]` per sample)."""
    n, device, dtype = len(samples), diffusion.device, diffusion.dtype
    scheduler = type(diffusion.scheduler).from_config(diffusion.scheduler.config)
    scheduler.set_timesteps(steps, device=device)
    updates = diffusion.steps(scheduler)
    generators = [torch.Generator(device).manual_seed(s.seed) for s in samples for _ in range(2)]
    if size % diffusion.latent_factor:
        raise ValueError(f"generate.size={size} is not a multiple of the VAE factor {diffusion.latent_factor}")
    side = size // diffusion.latent_factor
    shape = (2 * n, diffusion.latent_channels, side, side)
    initial = getattr(scheduler, "init_noise_sigma", 1.0)  # flow matching has none: it starts at σ = 1, pure noise
    latents = randn_tensor(shape, generator=generators, device=device, dtype=dtype) * initial
    noise = [randn_tensor(shape, generator=generators, device=device, dtype=dtype) if step.noisy else None
             for step in updates]
    shared = p2p.schedule([s.p2p_fraction for s in samples], steps, device)
    context = diffusion.condition(prompts, n, size)
    scales = torch.tensor([s.guidance_scale for s in samples], device=device, dtype=dtype).view(n, 1, 1, 1, 1)
    with diffusion.lock, thread_invariant_convolutions(), invariant_products():
        for i, (t, step) in enumerate(zip(scheduler.timesteps, updates)):
            x = step.scale_input(latents).unflatten(0, (n, 1, 2)).expand(-1, 2, -1, -1, -1, -1)
            out = diffusion.denoise(x.flatten(0, 2), t, context, shared[i]).unflatten(0, (n, 2, 2))
            out = (out[:, 0] + scales * (out[:, 1] - out[:, 0])).flatten(0, 1).to(latents.dtype)
            latents = step(out, latents, noise[i])
        decoded = diffusion.decode(latents).float()
    finite = torch.isfinite(decoded).flatten(1).all(1).view(n, 2).all(1)
    pixels = (decoded.nan_to_num(0.0) / 2 + 0.5).clamp(0, 1).mul(255).round().to(torch.uint8)
    images = pixels.permute(0, 2, 3, 1).unflatten(0, (n, 2)).cpu().numpy()
    return Rendered(images, finite.cpu().numpy())
