"""The image store: a path is a function of the pixels alone; writes round-trip losslessly."""

from __future__ import annotations

import numpy as np

from tasks.image import store
from tests.image.fixtures import read_png


def test_path_depends_on_pixels_only(tmp_path):
    image = np.random.default_rng(0).integers(0, 256, (4, 6, 3), dtype=np.uint8)
    other = image.copy()
    other[0, 0, 0] ^= 1
    assert store.image_path(image) == store.image_path(image.copy())
    assert store.image_path(other) != store.image_path(image)
    assert store.image_path(image.reshape(6, 4, 3)) != store.image_path(image)  # same bytes, other shape
    relative = store.write_png(tmp_path, image)
    assert relative == store.image_path(image) and relative.startswith(relative[3:5] + "/")
    assert (read_png(tmp_path / relative) == image).all()
    assert store.write_png(tmp_path, image) == relative  # rewriting the same pixels is the same file
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [relative.split("/")[1]]
