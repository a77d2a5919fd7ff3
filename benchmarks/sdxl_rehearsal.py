"""SDXL 1.0 base rehearsal: its published shapes (random weights) through generate and selection on this machine.

    python benchmarks/sdxl_rehearsal.py OUT                  # 128 px, 2 steps, 2 samples of one caption pair

1. `tasks.demo.paper_shapes.build_sdxl_base` writes SDXL 1.0 base's folder (`StableDiffusionXLPipeline`'s layout,
   float16) under OUT, once; the tiny CLIP beside it (selection's scores are noise with random weights either way).
2. The real path, loaded by the real loader (float32 on a CPU): `generate.run` over one caption pair (`--samples`
   samples in one UNet batch), then `selection.run` with its canonical render; the denoiser's calls are timed and
   their rows counted (`flows.measure.unet_time`), against the plan's count, (samples + accepted) x rows per
   sample x steps.
3. SD v1.5's UNet (random, its published shape) timed on as many rows at the same size, and both UNets' FLOPs per
   row counted by `torch.utils.flop_counter` (on the meta device): SDXL's rate predicted as SD v1.5's measured rate x
   the FLOPs ratio, against SDXL's measured rate. That prediction is how `BACKEND_NEEDS["sdxl"]`'s H100 rate is
   derived from SD v1.5's (at 512 px vs 1024 px, whose FLOPs it also prints).

Prints the table and writes it to OUT/sdxl_rehearsal.json. Needs ~16 GB of RAM on a CPU (the UNet alone is 10 GB in
float32).
"""

from __future__ import annotations

import gc
import tempfile
import time
from pathlib import Path
from typing import Annotated

import polars as pl
import torch
import typer
from bench import console, peak_memory_mib, start, table
from diffusers import UNet2DConditionModel
from torch.utils.flop_counter import FlopCounterMode

from flows.measure import unet_time
from tasks.core.loading import release_models
from tasks.core.schemas import PAIR
from tasks.core.writing import json_text
from tasks.demo.paper_shapes import SDXL_UNET, build_sdxl_base
from tasks.image import generate, p2p, render, selection
from tasks.image.params import BACKEND_NEEDS, GenerateParams, SelectionParams
from tasks.image.records import PairRecords
from tasks.stages import stage
from tasks.tiny.images import build_tiny_clip, sd15_unet

PAIRS = pl.DataFrame([{"caption_id": "p0", "image_id": "i0", "caption": "a dog sitting on a couch",
                       "counterfactual": "a cat sitting on a couch", "edit_type": "noun", "original_word": "dog",
                       "substitute": "cat"}], schema=PAIR)
PASS_ALL = SelectionParams(min_text_image_o=-1, min_text_image_c=-1, min_image_image=-1, min_clip_dir=-1,
                           min_subject_margin_o=None, min_subject_margin_c=None)
SD15_UNET = {"sample_size": 64, "cross_attention_dim": 768, **sd15_unet(320)}
LEGEND = (
    "rows per sample-step: the plan's (`BACKEND_NEEDS`) vs the denoiser's rows counted over generate and selection "
    "/ (samples + canonical renders) / steps.",
    "UNet rows/s: rows / seconds inside the denoiser's calls (the first call included), float32 on this CPU; SD v1.5 "
    "on as many calls of as many rows at the same size, P2P processors installed, no sharing.",
    "GFLOPs per row: `torch.utils.flop_counter` over one UNet row; predicted SDXL rows/s: SD v1.5's measured rate x "
    "SD v1.5's / SDXL's GFLOPs per row.",
)


def unet_parameters(config: dict) -> int:
    """The parameters of a UNet of `config` as published (the loaded one also holds its fused q·k·v copies)."""
    with torch.device("meta"):
        return sum(p.numel() for p in UNet2DConditionModel(**config).parameters())


def gflops(config: dict, side: int, context: int, added: bool) -> float:
    """GFLOPs of one UNet row over `side`² latents (counted on the meta device: no memory, no time)."""
    with torch.device("meta"):
        unet = UNet2DConditionModel(**config)
        kwargs = {"added_cond_kwargs": {"text_embeds": torch.zeros(1, 1280), "time_ids": torch.zeros(1, 6)}} \
            if added else {}
        with FlopCounterMode(display=False) as counter:
            unet(torch.zeros(1, 4, side, side), torch.tensor(10), torch.zeros(1, 77, context), **kwargs)
    return counter.get_total_flops() / 1e9


def sdxl_run(folder: Path, clip_spec, size: int, steps: int, samples: int) -> dict:
    """The SDXL folder through generate and selection; seconds, rows and rates."""
    params = GenerateParams(backend="sdxl", diffusion={"id": str(folder)}, vae=None, clip=clip_spec, size=size,
                            steps=steps, n_samples=samples, batch_samples=samples)
    began = time.perf_counter()
    models = render.load_models(params)
    loaded = time.perf_counter() - began
    with tempfile.TemporaryDirectory() as tmp, unet_time(models.diffusion, 1) as unet:
        screening = generate.Screening(params, PairRecords(Path(tmp)), models=models,
                                       unit=render.sample_unit(params, stage("generate").code))
        began = time.perf_counter()
        scores, _ = generate.run(PAIRS, screening, None)
        generated = time.perf_counter() - began
        began = time.perf_counter()
        kept, _, _ = selection.run(scores, PASS_ALL, params.black_threshold,
                                   lambda pairs, chosen: [render.canonical(pair, sample, params, models)
                                                          for pair, sample in zip(pairs, chosen)], Path(tmp, "img"))
        selected = time.perf_counter() - began
    rows_per_sample = params.needs.rows_per_sample
    return {"load_seconds": loaded, "generate_seconds": generated,
            "selection_seconds": selected, "samples": scores.height, "accepted": kept.height,
            "plan_rows": (scores.height + kept.height) * rows_per_sample * steps, "counted_rows": unet[1],
            "unet_seconds": unet[0], "rows_per_second": unet[1] / unet[0], "peak_rss_mib": peak_memory_mib()}


@torch.inference_mode()
def sd15_rate(size: int, steps: int, samples: int) -> float:
    """SD v1.5's UNet (random) rows/s on `steps` calls of `4 x samples` rows at `size` px."""
    torch.manual_seed(0)
    unet = UNet2DConditionModel(**SD15_UNET).eval()
    p2p.install(unet)
    rows = 4 * samples
    x, context = torch.randn(rows, 4, size // 8, size // 8), torch.randn(rows, 77, 768)
    began = time.perf_counter()
    for _ in range(steps):
        unet(x, torch.tensor(500), encoder_hidden_states=context, cross_attention_kwargs={"p2p_shared": None})
    return rows * steps / (time.perf_counter() - began)


def main(out: Path, size: Annotated[int, typer.Option(help="pixels (a multiple of 8)")] = 128,
         steps: Annotated[int, typer.Option(help="Euler-ancestral steps")] = 2,
         samples: Annotated[int, typer.Option(help="samples of the one caption pair (one UNet batch)")] = 2) -> None:
    folder = out / "models" / "stable-diffusion-xl-base-1.0"
    if not (folder / ".complete").is_file():
        began = time.perf_counter()
        with torch.random.fork_rng():
            torch.manual_seed(0)
            build_sdxl_base(folder)
        (folder / ".complete").write_text("0")
        console.print(f"built {folder} in {time.perf_counter() - began:.0f} s")
    clip_spec = build_tiny_clip(out / "models" / "tiny-clip", seed=0)
    xl = sdxl_run(folder, clip_spec, size, steps, samples)
    release_models()
    gc.collect()
    sd15 = sd15_rate(size, steps, samples)
    flops = {"sd15": gflops(SD15_UNET, size // 8, 768, False), "sdxl": gflops(SDXL_UNET, size // 8, 2048, True),
             "sd15_512": gflops(SD15_UNET, 64, 768, False), "sdxl_1024": gflops(SDXL_UNET, 128, 2048, True)}
    predicted = sd15 * flops["sd15"] / flops["sdxl"]
    needs = BACKEND_NEEDS["sdxl"]
    report = {"size": size, "steps": steps, "samples": samples, "sdxl": xl, "sd15_rows_per_second": sd15,
              "gflops_per_row": flops, "predicted_sdxl_rows_per_second": predicted,
              "h100_rows_per_second": needs.h100_rows_per_second}
    (out / "sdxl_rehearsal.json").write_text(json_text(report, indent=2))
    result = table(f"SDXL 1.0 base (random weights, {unet_parameters(SDXL_UNET) / 1e9:.3f} B UNet parameters) through "
                   f"generate and selection: 1 pair, {samples} samples, {steps} steps, {size} px, float32, CPU",
                   ["quantity", "plan estimate", "measured"], LEGEND)
    done = xl["samples"] + xl["accepted"]
    result.add_row("rows per sample-step", str(needs.rows_per_sample), f"{xl['counted_rows'] / done / steps:g}")
    result.add_row("UNet rows (generate + selection)", str(xl["plan_rows"]), str(xl["counted_rows"]))
    result.add_row(f"GFLOPs per row at {size} px: SD v1.5, SDXL", "", f"{flops['sd15']:.1f}, {flops['sdxl']:.1f}")
    result.add_row(f"SD v1.5 UNet rows/s at {size} px", "", f"{sd15:.2f}")
    result.add_row(f"SDXL UNet rows/s at {size} px", f"{predicted:.2f} (by FLOPs)", f"{xl['rows_per_second']:.2f}")
    result.add_row("GFLOPs per row: SD v1.5 at 512 px, SDXL at 1024 px", "",
                   f"{flops['sd15_512']:.1f}, {flops['sdxl_1024']:.1f}")
    result.add_row("H100 rows/s, SDXL at 1024 px", f"{needs.h100_rows_per_second:.1f} (432 x FLOPs ratio)", "–")
    result.add_row("wall s: load, generate, selection", "",
                   f"{xl['load_seconds']:.0f}, {xl['generate_seconds']:.0f}, {xl['selection_seconds']:.0f}")
    result.add_row("peak RSS MiB", "", f"{xl['peak_rss_mib']:.0f}")
    console.print(result)


if __name__ == "__main__":
    start(main)
