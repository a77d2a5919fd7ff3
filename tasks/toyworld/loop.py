"""The machinery of a toy-world training run: its options (`Run`), its device, and the `Trainer` that runs one model's
`Loop` (AdamW, one-cycle LR, clipped gradients, an optional EMA) with checkpoints, a progress bar and read-outs.

Invariants:
- `Run`'s fields other than `device` and `compile_unet` (workers, checkpoints, progress bar, accuracy read-outs)
  change no weight.
- `Schedule.draw == "stream"`: one `random.Random(seed)` drawn in the training process (`Trainer.rng`), shared by
  every loop in step order. `"pool"`: batch i of model m is drawn from `random.Random(f"{seed}:{m}:{i}")` alone
  (`batches.Pool`), by `Run.workers` processes ahead of the steps, so it is the same for any number of workers.
- A run killed after a checkpoint and resumed (`Run.resume`) ends with the same weights, losses and accuracy curve as
  an uninterrupted one on the same device and software (`Checkpoints`, `Trainer.snapshot`).
- A loop's read-out (`Loop.evaluate`) runs under `torch.random.fork_rng`: it draws from no generator the training
  draws from.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers.training_utils import EMAModel
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text
from torch.utils.data import DataLoader

from tasks.core.errors import UserError
from tasks.toyworld.batches import Pool
from tasks.toyworld.checkpoints import Checkpoints
from tasks.toyworld.params import CHECKPOINT, WEIGHTS, Schedule

log = logging.getLogger(__name__)
WARMUP = 0.05  # the one-cycle learning rate's warm-up, a share of each loop's steps
LOOP_STEPS = {"vae": ("vae_steps",), "diffusion": ("parse_steps", "diffusion_steps"), "clip": ("clip_steps",),
              "lms": ("lm_steps",)}  # per model a run may train, the loops it runs


def check_steps(schedule: Schedule, only: tuple[str, ...]) -> None:
    """Refuse, before any training, a loop whose warm-up would be exactly one step: torch's `OneCycleLR` divides by
    zero there (its first phase ends at step WARMUP × steps − 1 = 0)."""
    for field in (field for model in only for field in LOOP_STEPS[model]):
        if WARMUP * (steps := getattr(schedule, field)) == 1:
            raise UserError(f"--{field.replace('_', '-')} {steps}: a warm-up of one step ({WARMUP:.0%} of {steps}), "
                            f"which torch's one-cycle schedule cannot run; use {steps - 1} or {steps + 1}")


@dataclass(frozen=True)
class Run:
    """How a `train` call runs. `device`: auto (CUDA when there is one, else the CPU), cpu, cuda or cuda:i. `workers`:
    processes drawing a "pool" schedule's batches (0: the training process). `compile_unet`: `torch.compile` the
    UNet's step. `checkpoint_every`: steps between checkpoints in `out` (and one at each loop's end; 0: none), removed
    when the run ends; `resume` continues from one, or starts afresh when there is none. `eval_scenes`: fixed scenes
    the diffusion model draws at each checkpoint and at its end (`eval_steps` sampler steps, guidance
    `eval_guidance`; 0: none). `only`: the models trained, the others copied from the weights folder `reuse` (a new
    VAE needs a new UNet). `replace_committed`: OUTPUT may be the committed weights folder."""

    device: str = "auto"
    workers: int = 0
    compile_unet: bool = False
    checkpoint_every: int = 500
    resume: bool = False
    eval_scenes: int = 64
    eval_steps: int = 20
    eval_guidance: float = 2.0
    only: tuple[str, ...] = Schedule.MODELS
    reuse: Path = WEIGHTS
    progress: bool = False
    replace_committed: bool = False


def resolve(device: str) -> torch.device:
    """`auto`: the first CUDA device when torch sees one, else the CPU; else the device torch names."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        resolved = None
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if resolved is None or resolved.type not in ("cpu", "cuda") or (
            resolved.type == "cuda" and not (resolved.index or 0) < seen):
        raise UserError(f"device {device!r}: the toy world trains on auto, cpu, cuda or cuda:i (one of the {seen} "
                        "GPUs torch sees)")
    return resolved


@dataclass
class Loop:
    """One model's training: `steps` AdamW steps on `loss_of(batch)` (a scalar, or the loss then its parts, each
    recorded), batches of `size` drawn by `make`. `modules`
    hold every parameter the steps change (in the optimizer's order), `ema` the EMA of the first module's when one is
    kept; `evaluate()` reads the model's accuracy (at each checkpoint and at the end)."""

    name: str
    steps: int
    make: Callable[[random.Random, int], Any]
    size: int
    loss_of: Callable[[Any], torch.Tensor]
    modules: dict[str, torch.nn.Module]
    ema: EMAModel | None = None
    evaluate: Callable[[], dict] | None = None


class SamplesPerSecond(ProgressColumn):
    """A loop's speed: steps per second × its batch (the task's `size` field)."""

    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed * task.fields['size']:,.0f} samples/s" if speed else "– samples/s", style="cyan")


def progress_bar(shown: bool) -> Progress:
    return Progress(TextColumn("{task.description:>9}"), BarColumn(), MofNCompleteColumn(), SamplesPerSecond(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), disable=not shown)


class Trainer:
    """The loops of one `train` call on one device: the shared stream (`rng`), the checkpoints, the progress bar, and
    per loop its wall time (`seconds`, checkpoints and read-outs included) and accuracy curve (`curves`); `step` is the
    running loop's step (1-based) while its loss is computed."""

    def __init__(self, out: Path, schedule: Schedule, run: Run, progress: Progress) -> None:
        self.schedule, self.run, self.progress = schedule, run, progress
        self.device = resolve(run.device)
        self.rng = random.Random(schedule.seed)
        self.checkpoints = Checkpoints(out / CHECKPOINT if run.checkpoint_every else None,
                                       {"schedule": asdict(schedule),
                                        "only": [m for m in Schedule.MODELS if m in run.only]}, run.resume)
        self.seconds: dict[str, float] = {}
        self.step = 0
        self.curves: dict[str, list[dict]] = {}

    def rng_state(self) -> dict:
        return {"python": self.rng.getstate(), "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None}

    def set_rng_state(self, state: dict) -> None:
        self.rng.setstate(state["python"])
        torch.set_rng_state(state["torch"])
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda"], self.device)

    def batches(self, loop: Loop, start: int) -> Generator[Any, None, None]:
        """The loop's batches from step `start` on, drawn from the first `next` on (a "stream" schedule's continue
        `rng` where it stands then)."""
        if self.schedule.draw == "stream":
            while True:
                yield loop.make(self.rng, loop.size)
        yield from DataLoader(Pool(loop.make, loop.size, f"{self.schedule.seed}:{loop.name}", start), batch_size=None,
                              num_workers=self.run.workers, pin_memory=self.device.type == "cuda",
                              generator=torch.Generator())  # its own generator: no draw from torch's global one

    def fit(self, loop: Loop) -> list[float]:
        """Run `loop` (one-cycle learning rate, clipped gradients, the EMA stepped after each step) from its saved
        state when there is one; returns its losses."""
        params = [p for module in loop.modules.values() for p in module.parameters()]
        optimizer = torch.optim.AdamW(params, lr=self.schedule.lr)
        lr_scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, self.schedule.lr, total_steps=loop.steps,
                                                           pct_start=WARMUP)
        start, losses, curve, seconds = 0, [], [], 0.0
        if saved := self.checkpoints.loops.get(loop.name):
            start, losses, curve, seconds = saved["step"], list(saved["losses"]), list(saved["curve"]), saved["seconds"]
            self.restore(loop, saved, optimizer, lr_scheduler)
        task = self.progress.add_task(loop.name, total=loop.steps, completed=start, size=loop.size)
        averaged = next(iter(loop.modules.values()))
        batches, started, pending = self.batches(loop, start), time.perf_counter(), []
        try:
            for step in range(start + 1, loop.steps + 1):
                self.step = step
                loss = loop.loss_of(next(batches))
                optimizer.zero_grad(set_to_none=True)
                (loss[0] if loss.ndim else loss).backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                lr_scheduler.step()
                if loop.ema:
                    loop.ema.step(averaged.parameters())
                pending.append(loss.detach())
                self.progress.advance(task)
                checkpoint = self.run.checkpoint_every and step % self.run.checkpoint_every == 0
                if step % 100 == 1 or step == loop.steps or checkpoint:
                    losses += torch.stack(pending).tolist()
                    pending = []
                    log.info("%s step %d/%d loss %s", loop.name, step, loop.steps, np.mean(losses[-100:], 0).round(4))
                if loop.evaluate and self.run.eval_scenes and (checkpoint or step == loop.steps):
                    with torch.random.fork_rng([self.device] if self.device.type == "cuda" else []):
                        curve.append({"step": step, **loop.evaluate()})
                    log.info("%s step %d accuracy %s", loop.name, step, curve[-1])
                if self.checkpoints.path is not None and (checkpoint or step == loop.steps):
                    elapsed = seconds + time.perf_counter() - started
                    self.checkpoints.save(loop.name, self.snapshot(loop, step, losses, curve, elapsed, optimizer,
                                                                   lr_scheduler))
        finally:  # a pool's workers end with the loop, killed or not, not when the collector gets to them
            batches.close()
        self.seconds[loop.name] = round(seconds + time.perf_counter() - started, 1)
        self.curves[loop.name] = curve
        return losses

    def snapshot(self, loop: Loop, step: int, losses: list[float], curve: list[dict], seconds: float, optimizer,
                 lr_scheduler) -> dict:
        """A copy of all a loop's steps change at `step` (the optimizer and the LR schedule while it runs)."""
        running = step < loop.steps
        return copy.deepcopy({
            "step": step, "losses": losses, "curve": curve, "seconds": seconds, "rng": self.rng_state(),
            "modules": {name: module.state_dict() for name, module in loop.modules.items()},
            "ema": loop.ema.state_dict() if loop.ema else None,
            "optimizer": optimizer.state_dict() if running else None,
            "lr_scheduler": lr_scheduler.state_dict() if running else None})

    def restore(self, loop: Loop, saved: dict, optimizer, lr_scheduler) -> None:
        for name, module in loop.modules.items():
            module.load_state_dict(saved["modules"][name])
        if loop.ema:
            loop.ema.load_state_dict(saved["ema"])
            loop.ema.to(self.device)
        if saved["optimizer"] is not None:
            optimizer.load_state_dict(saved["optimizer"])
            lr_scheduler.load_state_dict(saved["lr_scheduler"])
        self.set_rng_state(saved["rng"])
