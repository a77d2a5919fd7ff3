"""The render loop without host work per step (issue 46): bit for bit the scheduler-stepped loop it replaced; fused
projections and a compiled UNet within float noise of eager, separate projections; on every device present."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from diffusers import EulerAncestralDiscreteScheduler
from diffusers.models.attention_processor import Attention
from diffusers.utils.torch_utils import randn_tensor

from tasks.core.loading import thread_invariant_convolutions
from tasks.core.specs import ModelSpec
from tasks.image import sampling
from tasks.image.backends.sd1 import SD1, Prompts, load_diffusion
from tasks.image.sampling import Sample
from tasks.tiny.images import TINY_IMAGE_SIZE, build_tiny_diffusion

SAMPLES = [Sample(101, 0.3, 7.5), Sample(202, 0.7, 15.0), Sample(303, 0.0, 10.0)]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


@torch.inference_mode()
@thread_invariant_convolutions()
def scheduler_stepped(diffusion: SD1, prompts: Prompts, samples: list[Sample], steps: int,
                      size: int) -> np.ndarray:
    """Reference: the loop as it ran before issue 46 — `scheduler.scale_model_input` and `scheduler.step` drawing
    each step's noise from the 2S generators one by one, the sharing mask built from a Python list every step; under
    the render's convolution setting, as the comparison is of loops, not kernels."""
    n, device, dtype = len(samples), diffusion.device, diffusion.dtype
    scheduler = EulerAncestralDiscreteScheduler.from_config(diffusion.scheduler.config)
    scheduler.set_timesteps(steps, device=device)
    generators = [torch.Generator(device).manual_seed(s.seed) for s in samples for _ in range(2)]
    side = size // diffusion.latent_factor
    latents = randn_tensor((2 * n, diffusion.latent_channels, side, side), generator=generators, device=device,
                           dtype=dtype) * scheduler.init_noise_sigma
    uncond, cond_o, cond_c = prompts.states
    context = torch.stack([uncond, uncond, cond_o, cond_c]).repeat(n, 1, 1)
    scales = torch.tensor([s.guidance_scale for s in samples], device=device, dtype=dtype).view(n, 1, 1, 1, 1)
    for i, t in enumerate(scheduler.timesteps):
        active = [i < s.p2p_fraction * steps for s in samples]
        shared = torch.tensor(active, device=device).repeat_interleave(2) if any(active) else None
        x = scheduler.scale_model_input(latents, t).unflatten(0, (n, 1, 2)).expand(-1, 2, -1, -1, -1, -1)
        eps = diffusion.unet(x.flatten(0, 2), t, encoder_hidden_states=context,
                             cross_attention_kwargs={"p2p_shared": shared}).sample.unflatten(0, (n, 2, 2))
        eps = (eps[:, 0] + scales * (eps[:, 1] - eps[:, 0])).flatten(0, 1).to(latents.dtype)
        latents = scheduler.step(eps, t, latents, generator=generators).prev_sample
    decoded = diffusion.vae.decode(latents / diffusion.scaling_factor).sample.float()
    pixels = (decoded / 2 + 0.5).clamp(0, 1).mul(255).round().to(torch.uint8)
    return pixels.permute(0, 2, 3, 1).unflatten(0, (n, 2)).cpu().numpy()


@pytest.fixture(scope="module")
def tiny_diffusion(tmp_path_factory) -> ModelSpec:
    """The tiny random SD (its own fixture, no polars on the import path: this module also runs on a lent GPU)."""
    return build_tiny_diffusion(tmp_path_factory.mktemp("tiny_sd") / "sd", seed=0)


def on(device: str, spec: ModelSpec, compile_unet: str = "auto") -> SD1:
    """float32 everywhere: a random net amplifies half-precision rounding past any useful bound (bf16 on an H100:
    up to 19 levels after 4 steps); the fp16 SD-shape figure is `benchmarks/image_stage.py`'s."""
    return load_diffusion(spec.model_copy(update={"device": device, "dtype": "float32"}), None, False, compile_unet)


def separate_projections(diffusion: SD1) -> SD1:
    """A copy whose attention layers project q, k, v one GEMM each (the fused weights stay, unused)."""
    unet = copy.deepcopy(diffusion.unet)
    for module in unet.modules():
        if isinstance(module, Attention):
            module.fused_projections = False
    return dataclasses.replace(diffusion, unet=unet)


def max_difference(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(int) - b.astype(int)).max())


@pytest.mark.parametrize("device", DEVICES)
def test_loop_is_bit_identical_to_the_scheduler_stepped_loop(tiny_diffusion, device):
    """Noise drawn up front in the scheduler's order, steps on precomputed scalars, masks from one table: the
    same pixels, byte for byte, for a batch mixing sharing and non-sharing samples."""
    diffusion = on(device, tiny_diffusion)
    prompts = diffusion.encode("a dog on a couch", "a cat on a couch")
    for steps in (1, 4, 7):
        fast = sampling.render(diffusion, prompts, SAMPLES, steps, TINY_IMAGE_SIZE).images
        assert np.array_equal(fast, scheduler_stepped(diffusion, prompts, SAMPLES, steps, TINY_IMAGE_SIZE))
    assert not np.array_equal(fast[:, 0], fast[:, 1])


@pytest.mark.parametrize("device", DEVICES)
def test_fused_and_compiled_unets_render_within_float_noise_of_eager(tiny_diffusion, device):
    """Fused q·k·v GEMMs and `torch.compile` change kernels, not the method: every pixel within 1 of the eager,
    separate-projection render, sharing samples included."""
    eager = on(device, tiny_diffusion, "off")
    compiled = on(device, tiny_diffusion, "reduce-overhead" if device == "cuda" else "default")
    prompts = eager.encode("a dog on a couch", "a cat on a couch")
    reference = sampling.render(separate_projections(eager), prompts, SAMPLES, 4, TINY_IMAGE_SIZE).images
    for diffusion in (eager, compiled):
        assert max_difference(sampling.render(diffusion, prompts, SAMPLES, 4, TINY_IMAGE_SIZE).images, reference) <= 1
    assert isinstance(compiled.unet, torch._dynamo.eval_frame.OptimizedModule)
    assert not np.array_equal(reference[:, 0], reference[:, 1])


def test_compile_auto_is_cuda_graphs_on_cuda_and_eager_elsewhere():
    assert sampling.compile_mode("auto", torch.device("cuda")) == "reduce-overhead"
    assert sampling.compile_mode("auto", torch.device("cpu")) is None
    assert sampling.compile_mode("off", torch.device("cuda")) is None
    assert sampling.compile_mode("max-autotune", torch.device("cpu")) == "max-autotune"


def test_a_scheduler_predicting_v_is_refused():
    scheduler = EulerAncestralDiscreteScheduler(prediction_type="v_prediction")
    scheduler.set_timesteps(3)
    with pytest.raises(ValueError, match="predicts 'v_prediction'"):
        sampling.ancestral_steps(scheduler)
