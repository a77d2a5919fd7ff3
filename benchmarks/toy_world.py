"""The toy world's models: how fast the diffusion model trains, and how well the committed models draw their captions
and keep a pair minimal by the world's own edits.

    python benchmarks/toy_world.py                          # training throughput only (under 2 minutes on 2 cores)
    python benchmarks/toy_world.py --pairs 40 --steps 20    # and the committed models' edits

Training: `cfgen toy-world train`'s diffusion loop (VAE encode, text encoder + UNet forward and backward, AdamW, EMA;
scenes drawn as a stream or by a pool of workers) for `--train-steps` steps per batch size, on the CPU and on CUDA when
torch sees a GPU, in a fresh process per device after one warm-up loop; prints s/step and samples/s.

Edits (`--pairs` > 0): per edit kind, pairs (C_o, C_c) of random scenes rendered by the pipeline's sampler with
attention sharing and without it (p2p fraction 0, same seed), read back by the checker. Prints, per edit kind: I_o
accuracy (C_o shown), pair accuracy, minimality among accurate pairs, with and without P2P, and the P2P gain; then the
training record (steps, wall time per model, final losses) and the weights' size.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import random
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from bench import ROOT, Repeats, alternating, console, in_fresh_process, spread, start, table

from tasks.core.specs import ModelSpec
from tasks.image.backends.sd1 import load_diffusion
from tasks.image.sampling import Sample, render
from tasks.toyworld import checker, models, truth, world
from tasks.toyworld.assemble import assemble
from tasks.toyworld.batches import clip_tokenizer
from tasks.toyworld.loop import Run, Trainer, progress_bar
from tasks.toyworld.params import Schedule
from tasks.toyworld.train import train_diffusion

WEIGHTS = ROOT / "tasks" / "toyworld" / "weights"
CUDA_BATCHES = (256, 1024)


def edits(rng: random.Random) -> dict[str, world.Spec]:
    """One scene's spec and its edits of each kind (a kind its spec has no site for is left out)."""
    spec, _ = world.sample(rng)
    first = spec.phrases[0]
    out = {"original": spec,
           "noun (shape)": world.with_phrase(spec, 0, shape=rng.choice([s for s in world.SHAPES if s != first.shape])),
           "lexical (colour)": world.with_phrase(spec, 0, colour=rng.choice([c for c in world.COLOURS
                                                                            if c != first.colour]))}
    if first.count < 3:
        out["quantifier"] = world.with_phrase(spec, 0, count=first.count + 1, size="small")
    if spec.relation:
        out["swap (phrases)"] = replace(spec, phrases=spec.phrases[::-1])
        out["delete (phrase)"] = world.Spec(spec.phrases[:1])
    return out


def edit_accuracy(pairs: int, steps: int, guidance: float, p2p_fraction: float, seed: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        assemble(WEIGHTS, Path(folder))
        diffusion = load_diffusion(ModelSpec(id=str(Path(folder) / "diffusion")), None)
        rng, results = random.Random(seed), {}
        started = time.perf_counter()
        for i in range(pairs):
            found = edits(rng)
            caption = world.caption(found.pop("original"))
            for kind, spec_c in found.items():
                counterfactual = world.caption(spec_c)
                prompts = diffusion.encode(caption, counterfactual)
                shared, alone = (render(diffusion, prompts, [Sample(seed * 10_000 + i, p, guidance)], steps,
                                        32).images[0] for p in (p2p_fraction, 0.0))
                verdicts = [truth.judge_pair(*images, caption, counterfactual) for images in (shared, alone)]
                results.setdefault(kind, []).append(
                    (checker.shows(shared[0], world.parse(caption)),
                     *(v[k] for v in verdicts for k in ("accurate", "minimal"))))
        wall = time.perf_counter() - started
    out = table(f"Toy world, committed weights: {pairs} scenes, {steps} steps, guidance {guidance}, p2p fraction "
                f"{p2p_fraction} vs 0 ({wall:.0f} s)",
                ["edit kind", "pairs", "I_o accuracy", "pair accuracy", "minimality (P2P)", "pair accuracy (no P2P)",
                 "minimality (no P2P)", "P2P gain"])
    for kind, rows in results.items():
        a = np.array(rows, dtype=float)
        with_p2p = a[a[:, 1] == 1, 2].mean() if a[:, 1].any() else float("nan")
        without = a[a[:, 3] == 1, 4].mean() if a[:, 3].any() else float("nan")
        out.add_row(kind, str(len(rows)), f"{a[:, 0].mean():.2f}", f"{a[:, 1].mean():.2f}", f"{with_p2p:.2f}",
                    f"{a[:, 3].mean():.2f}", f"{without:.2f}", f"{with_p2p - without:+.2f}")
    console.print(out)
    record = json.loads((WEIGHTS / "train.json").read_text())
    trained = table("Training (cfgen toy-world train, CPU)", ["model", "steps", "wall s", "final loss"])
    for name, seconds in record["seconds"].items():
        steps_key = {"vae": "vae_steps", "parse": "parse_steps", "diffusion": "diffusion_steps",
                     "clip": "clip_steps"}.get(name, "lm_steps")
        trained.add_row(name, str(record["schedule"][steps_key]), f"{seconds:.0f}",
                        f"{record['losses_per_50_steps'][name][-1]:.4f}")
    console.print(trained)
    size = sum(p.stat().st_size for p in WEIGHTS.rglob("*") if p.is_file())
    console.print(f"weights: {size / 2 ** 20:.1f} MiB in {WEIGHTS.relative_to(ROOT)}")


RECIPES = {"before (a137a7e)": Schedule.from_record({}), "issue 63": Schedule()}


Config = tuple[str, int, str, int, bool]  # recipe, batch, draw, workers, UNet compiled


def diffusion_seconds(device: str, configs: list[Config], steps: int, repeats: int) -> dict[Config, list[float]]:
    """Seconds of `steps` diffusion training steps per configuration, `repeats` runs each alternating, on the
    committed VAE, after a warm-up loop of each (compiling included; run in a process of its own)."""
    multiprocessing.set_start_method("fork", force=True)  # a pool's workers start as under `cfgen` (not spawned)
    scale = json.loads((WEIGHTS / "train.json").read_text())["scaling_factor"]
    with tempfile.TemporaryDirectory() as folder:
        def loop(recipe: str, batch: int, draw: str, workers: int, compiled: bool, n: int = steps) -> float:
            schedule = replace(RECIPES[recipe], diffusion_steps=n, batch=batch, draw=draw)
            t = Trainer(Path(folder), schedule, Run(device=device, workers=workers, eval_scenes=0,
                                                    compile_unet=compiled), progress_bar(False))
            unet, vae, text_encoder = (m.to(t.device) for m in models.diffusion_modules(schedule.attention_heads))
            vae.load_state_dict(models.full(models.load(WEIGHTS / "diffusion.safetensors")["vae"]))
            if t.device.type == "cuda":
                torch.cuda.synchronize()
            train_diffusion(t, unet, text_encoder, vae, scale)
            return t.seconds["diffusion"]

        clip_tokenizer()  # built once before a pool's workers fork, as `train` builds it
        for config in configs:
            loop(*config, n=2)
        return alternating({c: functools.partial(loop, *c) for c in configs}, repeats)


def training_rate(train_steps: int, batches: list[int], repeats: int) -> None:
    devices = {"cpu": [(r, b, "stream", 0, False) for r in RECIPES for b in batches]
               + [("issue 63", batches[-1], "pool", 1, False), ("issue 63", batches[-1], "stream", 0, True)]}
    if torch.cuda.is_available():
        workers = max(1, (os.cpu_count() or 2) - 2)
        devices["cuda"] = [(r, b, "pool", workers, c) for r in RECIPES for b in CUDA_BATCHES for c in (False, True)]
    out = table(f"Toy-world diffusion training: {train_steps} steps per run, {repeats} runs each",
                ["device", "recipe", "batch", "scenes drawn", "UNet", "s/step", "samples/s"],
                [("s/step: the loop's wall time / steps (the first step and the pool's start included); "
                  "samples/s: batch / that; UNet: eager or `--compile` (torch.compile, its first compile in the "
                  "warm-up loop); before: 8 heads, text encoder trained with the UNet; issue 63 (the "
                  "committed recipe): 2 heads, Min-SNR 5, frozen parsed encoder, grounding loss, low-SNR tilt")])
    for device, configs in devices.items():
        seconds = in_fresh_process(diffusion_seconds, device, configs, train_steps, repeats)
        for (recipe, batch, draw, workers, compiled), runs in seconds.items():
            out.add_row(device, recipe, str(batch), draw if draw == "stream" else f"pool, {workers} workers",
                        "compiled" if compiled else "eager",
                        spread([s / train_steps for s in runs], ".3f"),
                        spread([batch * train_steps / s for s in runs], ".0f"))
    console.print(out)


def main(train_steps: int = 40, batches: list[int] = [8, 32], repeats: Repeats = 3,  # noqa: B006 (typer's default)
         pairs: int = 0, steps: int = 20, guidance: float = 7.5, p2p_fraction: float = 0.6, seed: int = 0) -> None:
    training_rate(train_steps, batches, repeats)
    if pairs:
        edit_accuracy(pairs, steps, guidance, p2p_fraction, seed)


if __name__ == "__main__":
    start(main)
