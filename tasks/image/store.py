"""Content-addressed lossless image store: an image lives at a path derived from its pixels and nothing else.

`image_path(image)` = `ab/abcdef….png`, the hex of blake2b over the array's shape and uint8 bytes, relative to the
store root. So equal pixels share one path whatever code, params or run made them, and another path always means
other pixels (what `diff` relies on). Writes are atomic.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image


def image_path(image: np.ndarray) -> str:
    """The store path of an HxWx3 uint8 image, relative to the store root."""
    pixels = np.ascontiguousarray(image, dtype=np.uint8)
    key = hashlib.blake2b(repr(pixels.shape).encode() + pixels.tobytes(), digest_size=20).hexdigest()
    return f"{key[:2]}/{key}.png"


def write_png(root: Path, image: np.ndarray) -> str:
    """Store an HxWx3 uint8 image losslessly under `root` (atomic replace); returns its `image_path`."""
    relative = image_path(image)
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
    return relative
