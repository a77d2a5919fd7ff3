"""Image stage: UNet rows/s of cfgen's paired P2P sampler against diffusers' stock StableDiffusionPipeline, peak
memory, and UNet rows per accepted pair with and without adaptive stopping.

    python benchmarks/image_stage.py                                  # SD v1.5 UNet structure, width 64, 256 px, CPU
    python benchmarks/image_stage.py --width 320 --size 512 --steps 50 --batch-samples 8 \\
        --dtype float16 --channels-last --compile                     # the full SD v1.5 UNet shape, on a GPU

The models are random, written in the real SD v1 folder layout (`tiny_images.build_tiny_diffusion` with SD v1.5's
UNet blocks, `sd15_unet(width)`; a 768-wide text encoder as in SD v1.5), so both samplers load the same files and do
the same UNet FLOPs. Rows per call match: cfgen renders S samples as 4S rows ([uncond, cond] x [C_o, C_c]); the stock
pipeline gets 2S prompts (C_o and C_c, S times) under classifier-free guidance, also 4S rows. Both decode with the
VAE. Timing: both samplers in one process, one untimed call each, then --repeats timed calls alternating between
them; peak memory: each sampler alone in a fresh process.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from bench import console, in_fresh_process, peak_memory_mib, start, table

C_O, C_C = "a dog sitting on a couch in a living room", "a cat sitting on a couch in a living room"
PAIRS = [("a dog sitting on a couch", "a cat sitting on a couch"),
         ("a red car parked on the street", "a red bus parked on the street"),
         ("a man riding a horse on the beach", "a man riding a bicycle on the beach"),
         ("a plate of pizza on a table", "a plate of salad on a table")]


def generate_params(folder: Path, clip: Path | None, opts: dict):
    from tasks.core.params import GenerateParams
    from tasks.core.specs import ModelSpec
    from tasks.demo.tiny_images import build_tiny_clip

    return GenerateParams(
        diffusion=ModelSpec(id=str(folder), dtype=opts["dtype"]), vae=None,
        clip=build_tiny_clip(clip, seed=0) if clip else GenerateParams().clip, size=opts["size"], steps=opts["steps"],
        n_samples=opts["samples"], batch_samples=opts["batch_samples"], channels_last=opts["channels_last"],
        compile_unet=opts["compile"])


def sampler(stock: bool, folder: Path, opts: dict) -> Callable[[], None]:
    """One call of a sampler at 4 x batch_samples UNet rows per call: the stock pipeline or cfgen's paired one."""
    import torch

    from tasks.core.loading import resolve_device, resolve_dtype
    from tasks.image import sampling

    params, n = generate_params(folder, None, opts), opts["batch_samples"]
    device = resolve_device(params.diffusion)
    dtype = resolve_dtype(params.diffusion, device)
    if not stock:
        diffusion = sampling.load_diffusion(params.diffusion, None, params.channels_last, params.compile_unet)
        samples = [sampling.plan_sample(params, "bench", i) for i in range(n)]
        return lambda: sampling.render(diffusion, sampling.encode_prompts(diffusion, C_O, C_C), samples,
                                       params.steps, params.size)
    from diffusers import AutoencoderKL, EulerAncestralDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTokenizer

    pipe = StableDiffusionPipeline(  # the same files, diffusers' own classes and default attention processors
        vae=AutoencoderKL.from_pretrained(folder / "vae", dtype=dtype),
        text_encoder=CLIPTextModel.from_pretrained(folder / "text_encoder", dtype=dtype),
        tokenizer=CLIPTokenizer.from_pretrained(folder / "tokenizer"),
        unet=UNet2DConditionModel.from_pretrained(folder / "unet", dtype=dtype),
        scheduler=EulerAncestralDiscreteScheduler.from_pretrained(folder / "scheduler"),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False).to(device)
    if params.channels_last:
        pipe.unet.to(memory_format=torch.channels_last)
        pipe.vae.to(memory_format=torch.channels_last)
    if params.compile_unet:
        pipe.unet = torch.compile(pipe.unet)
    pipe.set_progress_bar_config(disable=True)
    return lambda: pipe(prompt=[C_O, C_C] * n, num_inference_steps=params.steps, guidance_scale=7.5,
                        height=params.size, width=params.size, output_type="np",
                        generator=torch.Generator(device).manual_seed(0))


def synchronized(call: Callable[[], None]) -> float:
    import torch

    t = time.perf_counter()
    call()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t


def time_samplers(folder: Path, opts: dict) -> dict:
    """In a fresh process: both samplers loaded, one untimed call each, then --repeats timed calls alternating
    between them (so drift on a shared machine hits both alike); seconds per call of each, and the device."""
    from tasks.core.loading import resolve_device, resolve_dtype

    calls = {stock: sampler(stock, folder, opts) for stock in (True, False)}
    seconds: dict[bool, list[float]] = {stock: [] for stock in calls}
    for call in calls.values():
        call()
    for _ in range(opts["repeats"]):
        for stock, call in calls.items():
            seconds[stock].append(synchronized(call))
    spec = generate_params(folder, None, opts).diffusion
    device = resolve_device(spec)
    return {"seconds": seconds, "device": f"{device.type} {resolve_dtype(spec, device)}"}


def peak_memory(stock: bool, folder: Path, opts: dict) -> float:
    """In a fresh process: peak memory of one sampler over one call (its loading included)."""
    synchronized(sampler(stock, folder, opts))
    return peak_memory_mib()


def adaptive_cost(folder: Path, clip: Path, opts: dict, adaptive: bool) -> dict:
    """In a fresh process: the image stage (generate.run) over the benchmark pairs; UNet rows and accepted pairs.
    The random CLIP's scores are noise, so selection keeps clip_dir >= 0: about half of the samples pass."""
    import polars as pl

    from tasks.core.params import AdaptiveParams, SelectionParams
    from tasks.image import generate, selection

    params = generate_params(folder, clip, opts).model_copy(update={"steps": opts["adaptive_steps"], "adaptive":
                                                            AdaptiveParams(enabled=adaptive, min_accepted=1,
                                                                           round_samples=opts["batch_samples"])})
    selection_params = SelectionParams(min_text_image_o=-1, min_text_image_c=-1, min_image_image=-1, min_clip_dir=0)
    pairs = pl.DataFrame({"caption_id": [f"bench-{i}" for i in range(len(PAIRS))],
                          "image_id": [f"img-{i}" for i in range(len(PAIRS))],
                          "caption": [o for o, _ in PAIRS], "counterfactual": [c for _, c in PAIRS]})
    t = time.perf_counter()
    scores, _ = generate.run(pairs, generate.Screening(params, {}), selection_params)
    seconds = time.perf_counter() - t
    accepted = selection.ranked(scores, selection_params).filter(pl.col("rank") == 0).height
    return {"samples": scores.height, "rows": int(scores["unet_evals"].sum()), "accepted": accepted,
            "seconds": seconds, "peak": peak_memory_mib()}


def main(width: Annotated[int, typer.Option(help="UNet top-level channels (SD v1.5: 320)")] = 64,
         size: Annotated[int, typer.Option(help="image side in pixels (SD v1.5: 512)")] = 256,
         steps: int = 20,
         batch_samples: Annotated[int, typer.Option(help="samples per UNet call (4 rows each)")] = 2,
         samples: Annotated[int, typer.Option(help="n_samples per pair in the adaptive table")] = 8,
         adaptive_steps: Annotated[int, typer.Option(help="steps in the adaptive table (rows scale with it)")] = 4,
         repeats: int = 5,
         dtype: Annotated[str, typer.Option(help="auto (fp32 on CPU), float16, bfloat16, float32")] = "auto",
         channels_last: bool = False,
         compile: Annotated[bool, typer.Option("--compile", help="torch.compile both UNets")] = False) -> None:
    from tasks.demo.tiny_images import build_tiny_diffusion, sd15_unet

    opts = dict(size=size, steps=steps, batch_samples=batch_samples, samples=samples, adaptive_steps=adaptive_steps,
                repeats=repeats, dtype=dtype, channels_last=channels_last, compile=compile)
    with tempfile.TemporaryDirectory(prefix="cfgen-bench-") as tmp:
        folder, clip = Path(tmp) / "sd", Path(tmp) / "clip"
        build_tiny_diffusion(folder, seed=0, unet=sd15_unet(width), text_width=768)
        timed = in_fresh_process(time_samplers, folder, opts)
        peak = {stock: in_fresh_process(peak_memory, stock, folder, opts) for stock in (True, False)}
        costs = {adaptive: in_fresh_process(adaptive_cost, folder, clip, opts, adaptive) for adaptive in (False, True)}
    rows = 4 * batch_samples * steps
    rate = {stock: rows / statistics.median(t) for stock, t in timed["seconds"].items()}
    speed = table(f"UNet rows/s: SD v1.5 UNet blocks at width {width}, {size} px, {steps} steps, "
                  f"{4 * batch_samples} rows per call, {timed['device']}"
                  f"{', channels_last' if channels_last else ''}{', compiled' if compile else ''}",
                  ("sampler", "calls", "median s per call", "UNet rows/s", "vs stock", "peak memory MiB"))
    for stock, name in ((True, "diffusers StableDiffusionPipeline (stock attention)"),
                        (False, "cfgen paired P2P sampler")):
        speed.add_row(name, str(repeats), f"{statistics.median(timed['seconds'][stock]):.2f}", f"{rate[stock]:.1f}",
                      f"{rate[stock] / rate[True]:.3f}x", f"{peak[stock]:.0f}")
    console.print(speed)
    cost = table(f"UNet rows per accepted pair: {len(PAIRS)} pairs, n_samples={samples}, {adaptive_steps} steps, "
                 "clip_dir >= 0 on a random CLIP (about half pass)",
                 ("adaptive stopping", "samples rendered", "UNet rows", "accepted pairs", "UNet rows / accepted pair",
                  "s", "peak memory MiB"))
    for adaptive, c in costs.items():
        per_pair = f"{c['rows'] / c['accepted']:.0f}" if c["accepted"] else "n/a"
        cost.add_row("on" if adaptive else "off (paper)", str(c["samples"]), str(c["rows"]), str(c["accepted"]),
                     per_pair, f"{c['seconds']:.1f}", f"{c['peak']:.0f}")
    console.print(cost)


if __name__ == "__main__":
    start(main)
