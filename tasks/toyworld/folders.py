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
from tasks.toyworld.params import CHECKPOINT, UNET_CHANNELS, WEIGHTS, Schedule

if TYPE_CHECKING:
    import torch

    from tasks.toyworld.loop import Run

BASE_BYTES, SAMPLE_BYTES = 1.2e9, 14e6  # a run's peak memory on the CPU: 1.69 GB at batch 32, 4.92 GB at 256

# The files each model's weights take in a weights folder (the VAE's are in its UNet's file).
FILES = {"vae": ("diffusion.safetensors",), "diffusion": ("diffusion.safetensors",), "clip": ("clip.safetensors",),
         "lms": ("mlm.safetensors", "clm.safetensors", "vocab")}
WRITTEN = {*(path for paths in FILES.values() for path in paths), "train.json", CHECKPOINT}  # what a run writes


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
    with the options: the schedule draws and spaces a known way, its numbers are finite, its learning rate positive,
    its EMA decay below 1, its heads split every UNet level's channels, its batch fits the device's memory
    (`check_fits`); the device is one torch sees, `run.only`
    names models, a new VAE comes with a new UNet, the reused folder holds a record and every file copied from it,
    a copied UNet has the schedule's shape."""
    from tasks.toyworld.loop import resolve

    check_fits(schedule.batch, resolve(run.device))
    if schedule.draw not in ("stream", "pool"):
        raise UserError(f"draw {schedule.draw!r}: scenes are drawn as a stream or from a pool")
    if schedule.spacing not in ("leading", "trailing"):
        raise UserError(f"spacing {schedule.spacing!r}: the sampler's timesteps are spaced leading or trailing")
    if bad := [k for k, v in asdict(schedule).items() if isinstance(v, float) and not math.isfinite(v)]:
        raise UserError(f"{', '.join(bad)}: a schedule's numbers are finite")
    if schedule.lr <= 0 or schedule.ema_decay >= 1:
        raise UserError(f"lr {schedule.lr}, ema decay {schedule.ema_decay}: a run learns at lr > 0 and averages at "
                        "ema decay < 1 (1 keeps the first weights)")
    if any(width % schedule.attention_heads for width in UNET_CHANNELS):
        splits = [n for n in range(1, min(UNET_CHANNELS) + 1) if not any(width % n for width in UNET_CHANNELS)]
        raise UserError(f"--attention-heads {schedule.attention_heads}: an attention layer's heads split its "
                        f"{'/'.join(map(str, sorted(set(UNET_CHANNELS))))} channels evenly: use one of {splits}")
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
    record, recorded = _record(run.reuse)
    copied = [m for m in Schedule.MODELS if m not in run.only]
    if missing := sorted({p for m in copied for p in FILES[m] if not (run.reuse / p).exists()}):
        raise UserError(f"{run.reuse} lacks {', '.join(missing)}: the weights of {', '.join(copied)} are reused "
                        "from it")
    if "diffusion" not in run.only and recorded.attention_heads != schedule.attention_heads:
        raise UserError(f"the reused UNet has {recorded.attention_heads} attention heads, the schedule "
                        f"{schedule.attention_heads}")
    return record


def check_fits(batch: int, device: torch.device) -> None:
    """A batch whose run would outgrow the device's whole memory (`BASE_BYTES` + `SAMPLE_BYTES` a sample) is one line
    naming the largest that fits, not an out-of-memory kill minutes in."""
    import torch

    total = (torch.cuda.mem_get_info(device)[1] if device.type == "cuda"
             else os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    if (need := BASE_BYTES + batch * SAMPLE_BYTES) > total:
        raise UserError(f"--batch {batch} needs about {need / 2**30:,.0f} GiB on {device}, which has "
                        f"{total / 2**30:,.0f} GiB: use --batch {int((total - BASE_BYTES) // SAMPLE_BYTES)} or less")


def _record(folder: Path) -> tuple[dict, Schedule]:
    """`folder`'s train.json, a training run's record (its schedule and latent scale), and the schedule it records;
    else one line."""
    try:
        record = json.loads((folder / "train.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{folder / 'train.json'} is no readable training record ({type(err).__name__})") from None
    if not (isinstance(record, dict) and isinstance(record.get("schedule"), dict)
            and isinstance(record.get("scaling_factor"), float)):
        raise UserError(f"{folder / 'train.json'} is no training record (its schedule and scaling_factor)")
    try:
        return record, Schedule.from_record(record["schedule"])
    except TypeError:
        unknown = sorted(set(record["schedule"]) - set(asdict(Schedule())))
        raise UserError(f"{folder / 'train.json'} records a schedule of another trainer (fields {unknown})") from None


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
