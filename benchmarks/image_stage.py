"""Image stage: UNet rows/s of cfgen's paired P2P sampler against diffusers' stock StableDiffusionPipeline (eager and
compiled), cfgen's pixels compiled against eager, peak memory, and UNet rows per accepted pair with and without
adaptive stopping.

    python benchmarks/image_stage.py                                  # SD v1.5 UNet structure, width 64, 256 px, CPU
    python benchmarks/image_stage.py --width 320 --size 512 --steps 20 --batch-samples 8 \
        --dtype float16 --no-memory --no-adaptive                     # the full SD v1.5 UNet shape, on a GPU

The models are random, written in the real SD v1 folder layout (`tasks.tiny.images.build_tiny_diffusion` with SD v1.5's
UNet blocks, `sd15_unet(width)`; a 768-wide text encoder as in SD v1.5), so every sampler loads the same files and does
the same UNet FLOPs. Rows per call match: cfgen renders S samples as 4S rows ([uncond, cond] x [C_o, C_c]); the stock
pipeline gets 2S prompts (C_o and C_c, S times) under classifier-free guidance, also 4S rows. All decode with the VAE.
The samplers (`SAMPLERS`): stock eager; stock with `torch.compile` (its default mode, as the issue-46 reference measured
it); cfgen as the paper profile ran before issue 46 (channels_last, eager); cfgen as configured now
(`generate.compile_unet`, default auto). Timing: all samplers in one process, one untimed call each (compiles included,
timed apart), then --repeats timed calls alternating between them; peak memory: each sampler alone in a fresh process;
the adaptive table: --repeats fresh processes each for off and on, alternating. Tables print median (min–max) and, under
each, a legend of what every column measures.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from bench import Repeats, alternating, console, in_fresh_process, peak_memory_mib, ratio, spread, start, table
from rich.table import Table

C_O, C_C = "a dog sitting on a couch in a living room", "a cat sitting on a couch in a living room"
PAIRS = [("a dog sitting on a couch", "a cat sitting on a couch"),
         ("a red car parked on the street", "a red bus parked on the street"),
         ("a man riding a horse on the beach", "a man riding a bicycle on the beach"),
         ("a plate of pizza on a table", "a plate of salad on a table")]


def generate_params(folder: Path, clip: Path | None, opts: dict):
    from tasks.core.specs import ModelSpec
    from tasks.image.params import GenerateParams
    from tasks.tiny.images import build_tiny_clip

    return GenerateParams(
        diffusion=ModelSpec(id=str(folder), dtype=opts["dtype"]), vae=None,
        clip=build_tiny_clip(clip, seed=0) if clip else GenerateParams().clip, size=opts["size"], steps=opts["steps"],
        n_samples=opts["samples"], batch_samples=opts["batch_samples"])


SAMPLERS = {  # name: (stock pipeline?, channels_last, compile mode or None; "now": --channels-last / --compile)
    "diffusers StableDiffusionPipeline, eager": (True, False, None),
    "diffusers StableDiffusionPipeline, torch.compile": (True, False, "default"),
    "cfgen P2P, paper profile before issue 46 (channels_last, eager)": (False, True, "off"),
    "cfgen P2P, now": (False, "now", "now"),
}
STOCK_EAGER, STOCK_COMPILED, _, NOW = SAMPLERS


def sampler(name: str, folder: Path, opts: dict) -> Callable[[], object]:
    """One call of a sampler at 4 x batch_samples UNet rows per call."""
    import torch

    from tasks.core.loading import resolve_device, resolve_dtype
    from tasks.image import sampling
    from tasks.image.backends.sd1 import load_diffusion

    stock, channels_last, mode = SAMPLERS[name]
    params, n = generate_params(folder, None, opts), opts["batch_samples"]
    device = resolve_device(params.diffusion)
    dtype = resolve_dtype(params.diffusion, device)
    if not stock:
        diffusion = load_diffusion(params.diffusion, None,
                                   opts["channels_last"] if channels_last == "now" else channels_last,
                                   opts["compile"] if mode == "now" else mode)
        samples = [sampling.plan_sample(params, "bench", i) for i in range(n)]
        return lambda: sampling.render(diffusion, diffusion.encode(C_O, C_C), samples, params.steps, params.size)
    from diffusers import AutoencoderKL, EulerAncestralDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTokenizer

    pipe = StableDiffusionPipeline(  # the same files, diffusers' own classes and default attention processors
        vae=AutoencoderKL.from_pretrained(folder / "vae", dtype=dtype),
        text_encoder=CLIPTextModel.from_pretrained(folder / "text_encoder", dtype=dtype),
        tokenizer=CLIPTokenizer.from_pretrained(folder / "tokenizer"),
        unet=UNet2DConditionModel.from_pretrained(folder / "unet", dtype=dtype),
        scheduler=EulerAncestralDiscreteScheduler.from_pretrained(folder / "scheduler"),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False).to(device)
    if mode:
        pipe.unet = torch.compile(pipe.unet, mode=mode)
    pipe.set_progress_bar_config(disable=True)
    return lambda: pipe(prompt=[C_O, C_C] * n, num_inference_steps=params.steps, guidance_scale=7.5,
                        height=params.size, width=params.size, output_type="np",
                        generator=torch.Generator(device).manual_seed(0))


def synchronized(call: Callable[[], object]) -> float:
    import torch

    t = time.perf_counter()
    call()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t


def time_samplers(folder: Path, opts: dict) -> dict:
    """In a fresh process: every sampler loaded and called once untimed (its first-call seconds kept: compiling
    included), then --repeats timed calls of each, alternating between them (so drift on a shared machine hits all
    alike); seconds per call of each, the device, and cfgen now's pixels against cfgen eager's."""
    from tasks.core.loading import resolve_device, resolve_dtype

    calls = {name: sampler(name, folder, opts) for name in SAMPLERS}
    first = {name: synchronized(call) for name, call in calls.items()}
    seconds = alternating({name: partial(synchronized, call) for name, call in calls.items()}, opts["repeats"])
    spec = generate_params(folder, None, opts).diffusion
    device = resolve_device(spec)
    return {"seconds": seconds, "first": first, "pixels": pixel_difference(folder, opts, calls[NOW]),
            "device": f"{device.type} {resolve_dtype(spec, device)}"}


def differing(images: np.ndarray, reference: np.ndarray) -> dict:
    """uint8 images against a reference: the largest |difference| and the share of differing values."""
    difference = np.abs(images.astype(int) - reference.astype(int))
    return {"max": int(difference.max()), "share": float((difference > 0).mean())}


def pixel_difference(folder: Path, opts: dict, now: Callable[[], object]) -> dict:
    """cfgen now's images against cfgen eager's (separate q·k·v projections: the path before issue 46, without
    channels_last) for the same samples (`differing`)."""
    from diffusers.models.attention_processor import Attention

    from tasks.image import sampling
    from tasks.image.backends.sd1 import load_diffusion

    params, n = generate_params(folder, None, opts), opts["batch_samples"]
    eager = load_diffusion(params.diffusion, None, False, "off")
    for module in eager.unet.modules():
        if isinstance(module, Attention):
            module.fused_projections = False
    samples = [sampling.plan_sample(params, "bench", i) for i in range(n)]
    reference = sampling.render(eager, eager.encode(C_O, C_C), samples, params.steps, params.size)
    return differing(now().images, reference.images)


def cold_images(folder: Path, opts: dict, cache: str) -> np.ndarray:
    """In a fresh process compiling into the empty folder `cache` (Inductor's and Triton's caches, so every kernel
    choice is made again): cfgen now's images of the timed call's samples."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"], os.environ["TRITON_CACHE_DIR"] = cache, f"{cache}/triton"
    return sampler(NOW, folder, opts)().images


def peak_memory(name: str, folder: Path, opts: dict) -> float:
    """In a fresh process: peak memory of one sampler over one call (its loading included)."""
    synchronized(sampler(name, folder, opts))
    return peak_memory_mib()


def swapped_word(caption: str, counterfactual: str) -> dict[str, str]:
    """The PAIR columns of a one-noun swap: the word of `caption` that `counterfactual` replaces, and its substitute."""
    original, substitute = next((a, b) for a, b in zip(caption.split(), counterfactual.split()) if a != b)
    return {"original_word": original, "substitute": substitute}


def adaptive_cost(folder: Path, clip: Path, opts: dict, adaptive: bool) -> dict:
    """In a fresh process: the image stage (generate.run, an empty sample store) over the benchmark pairs; UNet rows
    and accepted pairs.
    The random CLIP's scores are noise, so selection keeps clip_dir >= 0: about half of the samples pass."""
    import polars as pl

    from tasks.core.schemas import PAIR
    from tasks.image import generate, render, thresholds
    from tasks.image.params import AdaptiveParams, SelectionParams
    from tasks.image.records import PairRecords
    from tasks.stages import stage

    params = generate_params(folder, clip, opts).model_copy(update={"steps": opts["adaptive_steps"], "adaptive":
                                                            AdaptiveParams(enabled=adaptive, min_accepted=1,
                                                                           round_samples=opts["batch_samples"])})
    selection_params = SelectionParams(min_text_image_o=-1, min_text_image_c=-1, min_image_image=-1, min_clip_dir=0,
                                       min_subject_margin_o=None, min_subject_margin_c=None)  # clip_dir alone gates
    pairs = pl.DataFrame([{"caption_id": f"bench-{i}", "image_id": f"img-{i}", "caption": o, "counterfactual": c,
                           "edit_type": "noun", **swapped_word(o, c)} for i, (o, c) in enumerate(PAIRS)], schema=PAIR)
    with tempfile.TemporaryDirectory(prefix="cfgen-bench-records-") as records:
        t = time.perf_counter()
        screening = generate.Screening(params, PairRecords(Path(records)),
                                       unit=render.sample_unit(params, stage("generate").code))
        scores, _ = generate.run(pairs, screening, selection_params)
        seconds = time.perf_counter() - t
    accepted = thresholds.ranked(scores, selection_params).filter(pl.col("rank") == 0).height
    return {"samples": scores.height, "rows": int(scores["unet_evals"].sum()), "accepted": accepted,
            "seconds": seconds, "peak": peak_memory_mib()}


SPEED_LEGEND = (
    "s per call: wall seconds of one sampler call (prompt encoding, every step over the call's UNet rows, VAE decode; "
    "CUDA synchronized), timed in one process holding every sampler, after one untimed call each (first call s: "
    "that call, compiling included); the timed calls alternate between the samplers in the table's order.",
    "UNet rows/s: UNet rows per call × steps / s per call, per call.",
    "vs stock eager / compiled: the ratio of the median rates, then (min–max) of rate_i / that stock rate_i over the "
    "rounds i.",
    "peak memory MiB: each sampler alone in a fresh process, over loading and one call: peak CUDA memory allocated "
    "on a GPU, else peak RSS; those processes alternate between the samplers ('–': not measured, --no-memory).",
)
COST_LEGEND = (
    "Each run: a fresh process calling the image stage (`generate.run`) over all pairs; off and on alternate.",
    "samples rendered, UNet rows (the samples' `unet_evals` summed), accepted pairs (rank 0 after selection): counts "
    "over all pairs in one run; UNet rows / accepted pair: of that run.",
    "wall s: seconds of that `generate.run` call, total over all pairs (model loading on the first render "
    "included); peak memory MiB: that process's peak CUDA memory allocated on a GPU, else peak RSS.",
    "vs off: the ratio of the medians, then (min–max) of on_i / off_i over adjacent runs i.",
)


def speed_table(title: str, timed: dict, peak: dict, rows: int) -> Table:
    """Per sampler: seconds per call, UNet rows/s and their ratios to stock eager and compiled, the first call,
    peak memory."""
    rates = {name: [rows / s for s in seconds] for name, seconds in timed["seconds"].items()}
    result = table(title, ("sampler", "s per call", "UNet rows/s", "vs stock eager", "vs stock compiled",
                           "first call s", "peak memory MiB"), SPEED_LEGEND)
    for name in SAMPLERS:
        result.add_row(name, spread(timed["seconds"][name]), spread(rates[name], ".1f"),
                       *("–" if name == stock else ratio(rates[name], rates[stock], ".3f")
                         for stock in (STOCK_EAGER, STOCK_COMPILED)),
                       f"{timed['first'][name]:.1f}", spread(peak[name], ".0f") if name in peak else "–")
    return result


def cost_table(title: str, costs: dict) -> Table:
    """Per adaptive setting: samples, UNet rows, accepted pairs, rows per accepted pair and wall, each against off."""
    per_pair = {adaptive: [c["rows"] / c["accepted"] for c in runs] if all(c["accepted"] for c in runs) else None
                for adaptive, runs in costs.items()}  # None: some run accepted no pair
    wall = {adaptive: [c["seconds"] for c in runs] for adaptive, runs in costs.items()}
    result = table(title, ("adaptive stopping", "samples rendered", "UNet rows", "accepted pairs",
                           "UNet rows / accepted pair", "rows / accepted pair vs off", "wall s", "wall vs off",
                           "peak memory MiB"), COST_LEGEND)
    for adaptive, runs in costs.items():
        result.add_row("on" if adaptive else "off (paper)", *(spread([c[k] for c in runs], ".0f")
                                                              for k in ("samples", "rows", "accepted")),
                       spread(per_pair[adaptive], ".0f") if per_pair[adaptive] else "n/a",
                       ratio(per_pair[True], per_pair[False]) if adaptive and all(per_pair.values()) else "–",
                       spread(wall[adaptive]), ratio(wall[True], wall[False]) if adaptive else "–",
                       spread([c["peak"] for c in runs], ".0f"))
    return result


def main(width: Annotated[int, typer.Option(help="UNet top-level channels (SD v1.5: 320)")] = 64,
         size: Annotated[int, typer.Option(help="image side in pixels (SD v1.5: 512)")] = 256,
         steps: int = 20,
         batch_samples: Annotated[int, typer.Option(help="samples per UNet call (4 rows each)")] = 2,
         samples: Annotated[int, typer.Option(help="n_samples per pair in the adaptive table")] = 8,
         adaptive_steps: Annotated[int, typer.Option(help="steps in the adaptive table (rows scale with it)")] = 4,
         repeats: Repeats = 3,
         dtype: Annotated[str, typer.Option(help="auto (fp32 on CPU), float16, bfloat16, float32")] = "auto",
         compile: Annotated[str, typer.Option(help="generate.compile_unet of 'cfgen P2P, now'")] = "auto",
         channels_last: Annotated[bool, typer.Option(help="generate.channels_last of 'cfgen P2P, now'")] = False,
         memory: Annotated[bool, typer.Option(help="measure peak memory (a fresh process per sampler and repeat)")]
         = True,
         adaptive: Annotated[bool, typer.Option(help="the adaptive-stopping table (needs polars and open_clip)")]
         = True,
         cold: Annotated[bool, typer.Option(help="cfgen now's pixels from two fresh processes, each compiling from "
                                                 "empty caches")] = True) -> None:
    from tasks.tiny.images import build_tiny_diffusion, sd15_unet

    opts = dict(size=size, steps=steps, batch_samples=batch_samples, samples=samples, adaptive_steps=adaptive_steps,
                repeats=repeats, dtype=dtype, compile=compile, channels_last=channels_last)
    with tempfile.TemporaryDirectory(prefix="cfgen-bench-") as tmp:
        folder, clip = Path(tmp) / "sd", Path(tmp) / "clip"
        build_tiny_diffusion(folder, seed=0, unet=sd15_unet(width), text_width=768)
        timed = in_fresh_process(time_samplers, folder, opts)
        peak = alternating({name: partial(in_fresh_process, peak_memory, name, folder, opts) for name in SAMPLERS},
                           repeats) if memory else {}
        console.print(speed_table(f"UNet rows/s: SD v1.5 UNet blocks at width {width}, {size} px, {steps} steps, "
                                  f"{4 * batch_samples} rows per call, {timed['device']}; cfgen now: "
                                  f"compile_unet={compile}, channels_last={channels_last}; "
                                  f"median (min–max) of {repeats} calls / processes", timed, peak,
                                  4 * batch_samples * steps))
        console.print(f"cfgen now vs cfgen eager (separate projections), same samples: max |Δ pixel| "
                      f"{timed['pixels']['max']}, {timed['pixels']['share']:.2%} of pixel values differ")
        if cold:
            with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
                again = differing(*(in_fresh_process(cold_images, folder, opts, cache) for cache in (a, b)))
            console.print(f"cfgen now in two fresh processes, each compiling from empty caches, same samples: max "
                          f"|Δ pixel| {again['max']}, {again['share']:.2%} of pixel values differ")
        if adaptive:
            costs = alternating({on: partial(in_fresh_process, adaptive_cost, folder, clip, opts, on)
                                 for on in (False, True)}, repeats)
            console.print(cost_table(f"UNet rows per accepted pair: {len(PAIRS)} pairs, n_samples={samples}, "
                                     f"{adaptive_steps} steps, clip_dir >= 0 on a random CLIP (about half pass); "
                                     f"median (min–max) of {repeats} runs", costs))


if __name__ == "__main__":
    start(main)
