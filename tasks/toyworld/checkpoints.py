"""A training run's checkpoint file: every loop's state, rewritten whole at each save, read back as data.

Invariants:
- A kill mid-write leaves the previous checkpoint (a temporary file, renamed in).
- Reading runs no code (`torch.load(weights_only=True)`); an unreadable or foreign file is one line.
- A resumed run's `identity` (what it computes) must be the saved one's.
"""

from __future__ import annotations

import logging
import os
import zipfile
from pathlib import Path

import torch

from tasks.core.errors import UserError

log = logging.getLogger(__name__)


def read_checkpoint(path: Path) -> dict:
    """A checkpoint read as data (tensors and plain containers: `torch.load(weights_only=True)` runs no code), else a
    one-line `UserError` naming it and how to start afresh."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True) if zipfile.is_zipfile(path) else None
    except Exception as err:  # noqa: BLE001 (torch's unpickler raises many types for a torn or foreign file)
        raise UserError(f"{path} is no readable checkpoint ({type(err).__name__}): remove it to start afresh") from None
    if not isinstance(saved, dict) or not {"identity", "loops"} <= set(saved):
        raise UserError(f"{path} is no checkpoint of a toy-world run: remove it to start afresh")
    return saved


class Checkpoints:
    """`path` (None: checkpoints off) holds `{"identity", "loops": {name: snapshot}}`: each finished loop's end state
    and the current loop's latest (`Trainer.snapshot`), rewritten whole at each save through a temporary file, so a
    kill mid-write leaves the previous checkpoint. A resumed run's `identity` (what it computes) must be the saved
    one's."""

    def __init__(self, path: Path | None, identity: dict, resume: bool) -> None:
        self.path, self.identity, self.loops = path, identity, {}
        if resume and path is not None and path.exists():
            saved = read_checkpoint(path)
            if saved["identity"] != identity:
                raise UserError(f"{path} is a checkpoint of another run ({saved['identity']}): remove it to start "
                                "afresh")
            self.loops = saved["loops"]
            log.info("resuming from %s: %s", path, {name: s["step"] for name, s in self.loops.items()})

    def save(self, name: str, snapshot: dict) -> None:
        self.loops[name] = snapshot
        if self.path is not None:
            scratch = self.path.with_name(self.path.name + ".writing")
            torch.save({"identity": self.identity, "loops": self.loops}, scratch)
            os.replace(scratch, self.path)

    def remove(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
