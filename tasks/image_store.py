"""Content-addressed lossless image store: a sample's two PNGs live at paths derived from everything that fixes them.

Key = blake2b of the canonical JSON of (model fingerprints, C_o, C_c, seed, p2p_fraction, guidance_scale, steps,
size, p2p_mode, device type, dtype); floats enter as `repr`, which round-trips, so a row read back from parquet maps
to the same paths. Paths are relative to the store root: `ab/abcdef…_o.png` and `…_c.png`. Writes are atomic.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image


def sample_key(fingerprints: dict[str, str], caption: str, counterfactual: str, seed: int, p2p_fraction: float,
               guidance_scale: float, steps: int, size: int, p2p_mode: str, device: str, dtype: str) -> str:
    payload = {
        "models": fingerprints, "caption": caption, "counterfactual": counterfactual, "seed": seed,
        "p2p_fraction": repr(float(p2p_fraction)), "guidance_scale": repr(float(guidance_scale)), "steps": steps,
        "size": size, "p2p_mode": p2p_mode, "device": device, "dtype": dtype,
    }
    return hashlib.blake2b(json.dumps(payload, sort_keys=True).encode(), digest_size=20).hexdigest()


def relative_paths(key: str) -> tuple[str, str]:
    """(image_o, image_c) paths relative to the store root."""
    return f"{key[:2]}/{key}_o.png", f"{key[:2]}/{key}_c.png"


def write_png(root: Path, relative: str, image: np.ndarray) -> Path:
    """Store an HxWx3 uint8 image losslessly at `root/relative` (atomic replace); returns the absolute path."""
    path = Path(root) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8), "RGB").save(handle, format="PNG")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_png(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))
