"""What `cfgen plan` measures on this machine, through the stages' own code: the caption stages over a seeded sample
(captions/s, pairs per caption), generate's screening and selection's canonical render with UNet calls timed apart,
and each image stage's start-up."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl

from tasks.core.errors import UserError
from tasks.core.schemas import COUNTERFACTUALS
from tasks.stages import Params, caption_steps, skip_reason, step


def quiet_placement() -> None:
    """Drop the per-model "no GPU found" warning: the devices table says where everything runs."""
    from tasks.core.loading import log

    log.setLevel(logging.ERROR)


def caption_bench(source: Path, params: Params, sample: int) -> tuple[dict, list[dict]]:
    """(counts and seconds of the caption stages over a seeded sample of `source`, the caption pairs it produced)."""
    from tasks.text.ingest import read_captions

    captions = read_captions(source)[0]
    frame = captions.sample(min(sample, captions.height), seed=0)
    seconds = {"caption_seconds": 0.0, "caption_load_seconds": 0.0}
    for name in caption_steps():
        if skip_reason(name, params) or frame.is_empty():
            continue
        if name == "saliency":
            from flows.text import with_source_images

            frame = with_source_images(frame, params.paths)
        declared = step(name)
        section, logic = declared.section(params), declared.logic
        began = time.perf_counter()
        models = logic.load_models(section)
        loaded = time.perf_counter()
        frame = logic.run(frame, section, models)[0]
        seconds["caption_load_seconds"] += loaded - began
        seconds["caption_seconds"] += time.perf_counter() - loaded
    counts = {"captions": captions.height, "sample_captions": min(sample, captions.height),
              "sample_pairs": frame.height}
    return {**counts, **seconds}, frame.to_dicts()


@contextmanager
def unet_time(diffusion, rows_per_sample: int) -> Iterator[list[float]]:
    """[seconds inside the image backend's denoiser calls, samples x steps they denoised] while the block runs."""
    import torch

    spent, began = [0.0, 0], []
    denoiser, sync = diffusion.denoiser, torch.cuda.synchronize if diffusion.device.type == "cuda" else (lambda: None)

    def before(module, args):
        sync()
        began.append(time.perf_counter())

    def after(module, args, output):
        sync()
        spent[0] += time.perf_counter() - began.pop()
        spent[1] += args[0].shape[0] // rows_per_sample

    handles = [denoiser.register_forward_pre_hook(before), denoiser.register_forward_hook(after)]
    try:
        yield spent
    finally:
        for handle in handles:
            handle.remove()


def per_sample(total: float, unet: list[float], samples: int, steps: int) -> float:
    """A sample's seconds at `steps` steps from a timed run: its share of the rest, plus `steps` x UNet per step."""
    return (total - unet[0]) / samples + steps * unet[0] / unet[1]


def image_bench(params: Params, pairs: list[dict], bench_steps: int) -> dict:
    """Seconds of a screening sample and of a canonical render at the configured steps, model load, and the bytes of
    a pair-record line and of a PNG, through the image stages' code (one warm-up pair first, at one step)."""
    from PIL import Image

    from tasks.image import generate, render
    from tasks.image.records import PairRecords
    from tasks.image.sampling import plan_sample

    gen = params.generate
    began = time.perf_counter()
    models = render.load_models(gen)
    loaded = time.perf_counter() - began
    rows = gen.needs.rows_per_sample
    bench = gen.model_copy(update={"steps": bench_steps, "n_samples": gen.batch_samples})
    warm, timed = pairs[0], pairs[1:] or pairs
    warm_bench, code = bench.model_copy(update={"steps": 1}), step("generate").code
    with tempfile.TemporaryDirectory() as tmp:
        warm_up = generate.Screening(warm_bench, PairRecords(Path(tmp, "warm")), models=models,
                                     unit=render.sample_unit(warm_bench, code))
        generate.pair_rows(warm, warm_up, None)
        screening = generate.Screening(bench, PairRecords(Path(tmp, "timed")), models=models,
                                       unit=render.sample_unit(bench, code))
        with unet_time(models.diffusion, rows) as unet:
            began = time.perf_counter()
            for pair in timed:
                generate.pair_rows(pair, screening, None)
            screened = time.perf_counter() - began
        record_bytes = sum(f.stat().st_size for f in Path(tmp, "timed").rglob("*.jsonl"))
    with unet_time(models.diffusion, rows) as canonical_unet:
        began = time.perf_counter()
        renders = [render.canonical(pair, plan_sample(bench, pair["caption_id"], 0), bench, models) for pair in timed]
        canonical = time.perf_counter() - began
    pngs = [io.BytesIO() for _ in range(2 * len(renders))]
    for png, image in zip(pngs, (image for r in renders for image in r["images"])):
        Image.fromarray(image, "RGB").save(png, format="PNG")
    samples = screening.rendered
    return {"sample_seconds": per_sample(screened, unet, samples, gen.steps),
            "canonical_seconds": per_sample(canonical, canonical_unet, len(renders), gen.steps),
            "image_load_seconds": loaded, "record_bytes": record_bytes / samples,
            "png_bytes": sum(p.tell() for p in pngs) / len(pngs), "unet_rows_per_second": rows * unet[1] / unet[0]}


def startup_seconds(params: Params, params_file: Path, overrides: list[str]) -> dict[str, float]:
    """Wall seconds of each image stage's `cfgen` command on an empty input (selection reads generate's empty
    output), under this command's Prefect API."""
    from flows.engine.server import prefect_api

    flags = ["--params-file", str(params_file), *(a for o in overrides for a in ("-p", o))]
    with tempfile.TemporaryDirectory() as tmp, prefect_api() as url:
        pairs, scores = Path(tmp, "pairs.parquet"), Path(tmp, "samples.parquet")
        pl.DataFrame(schema=COUNTERFACTUALS).write_parquet(pairs)
        commands: dict[str, list[str | Path]] = {
            "generate": ["generate", pairs, Path(tmp, "out.parquet")],
            "selection": ["selection", scores, Path(tmp, "selected.parquet"), "--selected-images", Path(tmp, "images")]}
        seconds = {}
        for name, command in commands.items():
            began = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "flows.cli", *map(str, command), *flags], cwd=params.root,
                                  env={**os.environ, "PREFECT_API_URL": url}, capture_output=True, text=True)
            seconds[name] = time.perf_counter() - began
            if done.returncode:
                raise UserError(f"`cfgen {name}` on an empty input failed: "
                                f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
            if name == "generate":
                os.replace(command[2], scores)
    return seconds
