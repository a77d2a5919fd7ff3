"""The toy world's models: how fast the diffusion model trains, and how well the committed models draw their captions
and keep a pair minimal by the world's own edits.

    python benchmarks/toy_world.py                          # training throughput only (under 2 minutes on 2 cores)
    python benchmarks/toy_world.py --train-steps 0 --pairs 100   # the committed models' edits, P2P's two forms
    python benchmarks/toy_world.py --train-steps 0 --phases 30   # where a training step's time goes (--compiled)

Training: `cfgen toy-world train`'s diffusion loop (VAE encode, text encoder + UNet forward and backward, AdamW, EMA;
scenes drawn as a stream or by a pool of workers) for `--train-steps` steps per batch size, on the CPU and on CUDA when
torch sees a GPU, in a fresh process per device after one warm-up loop; prints s/step and samples/s.

Edits (`--pairs` > 0): the world's own edits of random scenes (a shape, a colour, a count, the phrases swapped, a
phrase deleted), each pair rendered by the pipeline's sampler at the demo's setting (10 steps, guidance U(2, 5) per
pair) without attention sharing and, at each `--p2p-fraction`, with each form of it: self-attention maps (the
paper's), and with the cross-attention maps of the words C_c shares with C_o added (`generate.p2p_tokens`); read
back by truth's judge. Prints per form, fraction and edit kind: pair accuracy and accurate + minimal with and without
sharing, and the P2P gain with its 95% interval; then the training record (steps, wall time per model, final
losses) and the weights' size.
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
import polars as pl
import torch
from bench import ROOT, Repeats, alternating, console, in_fresh_process, spread, start, table, time_inside

from tasks.core.specs import ModelSpec
from tasks.image.backends.sd1 import load_diffusion
from tasks.image.sampling import Sample, render
from tasks.toyworld import grounding, models, stats, truth, world
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


ARMS = {False: "self-attention", True: "+ words (p2p_tokens)"}


def edit_accuracy(pairs: int, steps: int, guidance: tuple[float, float], fractions: list[float], seed: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        assemble(WEIGHTS, Path(folder))
        spec = ModelSpec(id=str(Path(folder) / "diffusion"))
        diffusions = {tokens: load_diffusion(spec, None, False, "off", tokens) for tokens in ARMS}
        rng, rows = random.Random(seed), []
        started = time.perf_counter()
        for i in range(pairs):
            found = edits(rng)
            caption = world.caption(found.pop("original"))
            for kind, spec_c in found.items():
                counterfactual = world.caption(spec_c)
                sample = functools.partial(Sample, seed * 10_000 + i, guidance_scale=rng.uniform(*guidance))

                def verdict(tokens: bool, fraction: float) -> tuple[bool, bool]:
                    diffusion = diffusions[tokens]
                    images = render(diffusion, diffusion.encode(caption, counterfactual),
                                    [sample(p2p_fraction=fraction)], steps, 32).images[0]
                    judged = truth.judge_pair(*images, caption, counterfactual)
                    return judged["accurate"], judged["minimal"]

                alone = verdict(False, 0.0)
                rows += [{"kind": kind, "arm": ARMS[tokens], "fraction": fraction, "n": 1, "accurate": accurate,
                          "minimal": minimal, "accurate_alone": alone[0], "minimal_alone": alone[1]}
                         for tokens in ARMS for fraction in fractions
                         for accurate, minimal in [verdict(tokens, fraction)]]
        wall = time.perf_counter() - started
    frame = pl.DataFrame(rows)
    out = table(f"Toy world, committed weights: the world's own edits of {pairs} scenes, {steps} steps, guidance "
                f"U{guidance}, each pair with sharing and without (p2p fraction 0, same seed; {wall:.0f} s)",
                ["sharing", "p2p fraction", "edit kind", "pairs", "pair accuracy (no P2P)", "pair accuracy",
                 "accurate + minimal (no P2P)", "accurate + minimal", "P2P gain (95%)"],
                ["accurate + minimal: truth's `minimal` (shows its edit, what both captions share unchanged and in "
                 "place); P2P gain: its share with sharing minus without, the interval resampling pairs"])
    for (arm, fraction), group in frame.group_by("arm", "fraction", maintain_order=True):
        for kind, part in [("all", group), *((k, g) for (k,), g in group.group_by("kind", maintain_order=True))]:
            gain = stats.by_pair(part.select("n", "minimal", "minimal_alone").cast(pl.Int64),
                                 lambda t: (t["minimal"] - t["minimal_alone"]) / t["n"])
            out.add_row(arm, f"{fraction:g}", kind, str(part.height),
                        *(f"{part[c].mean():.3f}" for c in ("accurate_alone", "accurate", "minimal_alone", "minimal")),
                        f"{gain['value']:+.3f} ({gain['ci95'][0]:+.3f}–{gain['ci95'][1]:+.3f})")
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


PHASES = {"scenes drawn (with their masks)": (grounding, "batch"), "grounding loss": (grounding, "loss"),
          "backward": (torch.Tensor, "backward"), "gradient clipping": (torch.nn.utils, "clip_grad_norm_"),
          "AdamW": (torch.optim.AdamW, "step")}
"""Where the loop's step spends its time, besides the models' forward passes (timed on the models themselves)."""


def phase_seconds(steps: int, compiled: bool) -> tuple[float, dict[str, float]]:
    """The committed recipe's loop (batch 32, stream) for `steps` steps after a warm-up loop: its wall seconds and
    the seconds inside each phase (`PHASES`, the EMA's step and each model's forward)."""
    from diffusers.training_utils import EMAModel

    spent = {name: [0.0] for name in [*PHASES, "EMA", "VAE encode", "text encoder", "UNet forward"]}
    for name, (owner, attribute) in {**PHASES, "EMA": (EMAModel, "step")}.items():
        time_inside(owner, attribute, spent[name])
    scale = json.loads((WEIGHTS / "train.json").read_text())["scaling_factor"]
    clip_tokenizer()
    with tempfile.TemporaryDirectory() as folder:
        def loop(n: int) -> float:
            schedule = replace(RECIPES["issue 63"], diffusion_steps=n, batch=32, draw="stream")
            t = Trainer(Path(folder), schedule, Run(device="cpu", workers=0, eval_scenes=0, compile_unet=compiled),
                        progress_bar(False))
            unet, vae, text_encoder = models.diffusion_modules(schedule.attention_heads)
            vae.load_state_dict(models.full(models.load(WEIGHTS / "diffusion.safetensors")["vae"]))
            for name, owner, attribute in (("VAE encode", vae, "encode"), ("text encoder", text_encoder, "forward"),
                                           ("UNet forward", unet, "forward")):
                time_inside(owner, attribute, spent[name])
            train_diffusion(t, unet, text_encoder, vae, scale)
            return t.seconds["diffusion"]

        loop(3)
        for seconds in spent.values():
            seconds[0] = 0.0
        return loop(steps), {name: seconds[0] for name, seconds in spent.items()}


def step_phases(steps: int, compiled: bool) -> None:
    wall, spent = in_fresh_process(phase_seconds, steps, compiled)
    out = table(f"Toy-world diffusion training, the committed recipe ({'compiled' if compiled else 'eager'} UNet, "
                f"batch 32, stream): {steps} steps, {wall / steps:.3f} s/step, {32 * steps / wall:.0f} samples/s",
                ["phase", "ms/step", "share of the step"],
                ["the seconds inside each call, per step; backward: the loss's, through the UNet (and the grounding "
                 "maps); the rest of the step (noise, timesteps, the loss, the learning rate) is what no row holds"])
    for name, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        out.add_row(name, f"{1000 * seconds / steps:.1f}", f"{seconds / wall:.1%}")
    out.add_row("the rest", f"{1000 * (wall - sum(spent.values())) / steps:.1f}",
                f"{1 - sum(spent.values()) / wall:.1%}")
    console.print(out)


def main(train_steps: int = 40, batches: list[int] = [8, 32], repeats: Repeats = 3,  # noqa: B006 (typer's default)
         pairs: int = 0, steps: int = 10, guidance: tuple[float, float] = (2.0, 5.0),
         p2p_fraction: list[float] = [0.2, 0.5, 0.8], seed: int = 0,  # noqa: B006
         phases: int = 0, compiled: bool = False) -> None:
    if train_steps:
        training_rate(train_steps, batches, repeats)
    if phases:
        step_phases(phases, compiled)
    if pairs:
        edit_accuracy(pairs, steps, guidance, p2p_fraction, seed)


if __name__ == "__main__":
    start(main)
