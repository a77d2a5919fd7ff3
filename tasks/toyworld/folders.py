"""Where a training run reads and writes: the weights folder it reuses, and its OUTPUT, built in a staging folder
beside it and swapped in whole — checked, like a run's options, before any work.

Invariants:
- OUTPUT is replaced whole or not at all: a run writes everything (its checkpoint too) into `staging(out)`, and only a
  finished run's folder takes OUTPUT's place; a killed run leaves OUTPUT as it was, and `Run.resume` continues in the
  staging folder. A kill between the swap's two renames is undone by the next run (`staged`).
- Nothing is deleted that a run did not write: an OUTPUT holding anything but a weights folder's files is refused, and
  so is the committed weights folder unless asked for (`Run.replace_committed`).
- A refused option or write is one line (`UserError`, `OutputError`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.core.errors import UserError
from tasks.core.writing import OutputError, os_reason
from tasks.toyworld.params import CHECKPOINT, WEIGHTS, Schedule

if TYPE_CHECKING:
    from tasks.toyworld.loop import Run

# What a training run writes into its OUTPUT (the VAE's weights are in the diffusion model's file).
WRITTEN = {"diffusion.safetensors", "clip.safetensors", "mlm.safetensors", "clm.safetensors", "vocab", "train.json",
           CHECKPOINT}


def staging(out: Path) -> Path:
    return out.with_name(f".{out.name}.training")


def _replaced(out: Path) -> Path:
    return out.with_name(f".{out.name}.replaced")


def check_output(out: Path, replace_committed: bool) -> None:
    """OUTPUT is new, empty or a weights folder (its files only), and not the committed one unless asked for (no
    torch import: the CLI checks it first)."""
    if out.resolve() == WEIGHTS.resolve() and not replace_committed:
        raise UserError(f"{out} holds the committed weights: train into another folder, or pass --replace-committed")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file, not a weights folder")
    if out.is_dir() and (extra := sorted({p.name for p in out.iterdir()} - WRITTEN)):
        raise UserError(f"{out} holds files no training run writes ({', '.join(extra[:3])}): train into a new or "
                        "empty folder")


def reused_record(out: Path, schedule: Schedule, run: Run) -> dict | None:
    """The `train.json` of `run.reuse` when some model is copied from there (None when every model trains), checked
    with the options: the schedule draws and spaces a known way and its numbers are finite, the device is one torch
    sees, `run.only` names models, a new VAE comes with a new UNet, a copied UNet has the schedule's shape."""
    from tasks.toyworld.loop import resolve

    resolve(run.device)
    if schedule.draw not in ("stream", "pool"):
        raise UserError(f"draw {schedule.draw!r}: scenes are drawn as a stream or from a pool")
    if schedule.spacing not in ("leading", "trailing"):
        raise UserError(f"spacing {schedule.spacing!r}: the sampler's timesteps are spaced leading or trailing")
    if bad := [k for k, v in asdict(schedule).items() if isinstance(v, float) and not math.isfinite(v)]:
        raise UserError(f"{', '.join(bad)}: a schedule's numbers are finite")
    if unknown := set(run.only) - set(Schedule.MODELS):
        raise UserError(f"no model {sorted(unknown)} to train: the models are {', '.join(Schedule.MODELS)}")
    if "vae" in run.only and "diffusion" not in run.only:
        raise UserError("a new VAE needs a new UNet: train the diffusion model with it")
    check_output(out, run.replace_committed)
    if set(run.only) == set(Schedule.MODELS):
        return None
    if not (run.reuse / "train.json").is_file():
        raise UserError(f"{run.reuse} holds no trained weights (train.json) to reuse")
    if out.resolve() == run.reuse.resolve():
        raise UserError(f"{out} is the folder whose weights are reused: train into another one")
    record = json.loads((run.reuse / "train.json").read_text())
    heads = Schedule.from_record(record["schedule"]).attention_heads
    if "diffusion" not in run.only and heads != schedule.attention_heads:
        raise UserError(f"the reused UNet has {heads} attention heads, the schedule {schedule.attention_heads}")
    return record


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """The staging folder to build `out` in (made, or kept for a resume), swapped in as `out` once the block ends
    without an error; an OSError on the way is one line naming the file."""
    folder, replaced = staging(out), _replaced(out)
    try:
        if replaced.exists() and not out.exists():
            os.replace(replaced, out)  # a kill between the swap's renames: the old OUTPUT back first
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        shutil.rmtree(replaced, ignore_errors=True)
        if out.exists():
            os.replace(out, replaced)
        os.replace(folder, out)
        shutil.rmtree(replaced, ignore_errors=True)
    except OSError as err:
        raise OutputError(f"{err.filename or out}: {os_reason(err)}") from None
