"""Reads an image back into the toy world's terms with plain image analysis (no learned model), and checks captions.

Each pixel takes the nearest of the background and the palette colours (in RGB), or none when it is far from all;
the connected regions of one colour (at least `MIN_AREA` of the image) are the objects. A region's shape is read from
how much of its bounding box it fills (a square ~1, a circle ~π/4, a triangle ~1/2), its size from the box's longer
side. On `world.render`'s images this is exact; on a generated one it tolerates blur and noise up to `FAR`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

import numpy as np
from scipy import ndimage

from tasks.toyworld.world import BACKGROUND, COLOURS, SIZES, Spec, holds

FAR = 90.0  # RGB distance beyond which a pixel is no palette colour (palette colours are >= 150 apart)
MIN_AREA = 0.02  # of the image: a smaller region is noise (a small triangle is ~0.034)
FILL_SQUARE, FILL_CIRCLE = 0.93, 0.66  # fill ratio above FILL_SQUARE: square; above FILL_CIRCLE: circle; else triangle
SIZE_SPLIT = (SIZES["small"] + SIZES["large"]) / 2
PLACE_TOLERANCE = 0.1  # of the image side: one object "at the same place" in two images
_PALETTE = np.array([BACKGROUND, *COLOURS.values()], np.float32)
_NAMES = [None, *COLOURS]


@dataclass(frozen=True)
class Seen:
    shape: str
    colour: str
    size: str
    x: float
    y: float


def objects(image: np.ndarray) -> list[Seen]:
    """The objects of an (H, W, 3) uint8 image, top to bottom then left to right."""
    h, w, _ = image.shape
    distance = np.linalg.norm(image[:, :, None, :].astype(np.float32) - _PALETTE, axis=-1)
    label = np.where(distance.min(-1) <= FAR, distance.argmin(-1), 0)
    seen = []
    for index in range(1, len(_PALETTE)):
        regions, n = ndimage.label(label == index)
        for k, box in enumerate(ndimage.find_objects(regions), start=1):
            area = int((regions[box] == k).sum())
            if area < MIN_AREA * h * w:
                continue
            bh, bw = box[0].stop - box[0].start, box[1].stop - box[1].start
            fill = area / (bh * bw)
            shape = "square" if fill > FILL_SQUARE else "circle" if fill > FILL_CIRCLE else "triangle"
            seen.append(Seen(shape, _NAMES[index], "large" if max(bh / h, bw / w) > SIZE_SPLIT else "small",
                             float((box[1].start + box[1].stop) / 2 / w), float((box[0].start + box[0].stop) / 2 / h)))
    return sorted(seen, key=lambda s: (round(s.y, 2), s.x))


def assign(seen: list[Seen], spec: Spec) -> list[list[Seen]] | None:
    """`seen` split into the spec's phrases (each its count of matching objects, every object used once) such that the
    relation holds between the first and the second phrase, or None when no split does."""
    counts = [p.count for p in spec.phrases]
    if sum(counts) != len(seen) or len(seen) > 6:
        return None
    for order in permutations(seen):
        groups, start = [], 0
        for count in counts:
            groups.append(list(order[start:start + count]))
            start += count
        if all(_fits(o, p) for group, p in zip(groups, spec.phrases) for o in group) and (
                spec.relation is None or all(holds(spec.relation, (a.x, a.y), (b.x, b.y))
                                             for a in groups[0] for b in groups[1])):
            return groups
    return None


def _fits(obj: Seen, phrase) -> bool:
    return obj.shape == phrase.shape and phrase.colour in (None, obj.colour) and phrase.size in (None, obj.size)


def shows(image: np.ndarray, spec: Spec | None) -> bool:
    """The image shows exactly what `spec` states (a None spec, no world caption, is shown by nothing)."""
    return spec is not None and assign(objects(image), spec) is not None


def minimal(image_o: np.ndarray, image_c: np.ndarray, spec_o: Spec, spec_c: Spec) -> bool:
    """Both images show their spec, and everything the two specs share is the same in both: for each phrase index
    both have with one count, its objects pair up at the same places (± PLACE_TOLERANCE) with equal shape, colour and
    size, except an attribute the two phrases state differently."""
    groups_o, groups_c = assign(objects(image_o), spec_o), assign(objects(image_c), spec_c)
    if groups_o is None or groups_c is None:
        return False
    for p_o, p_c, group_o, group_c in zip(spec_o.phrases, spec_c.phrases, groups_o, groups_c):
        if p_o.count != p_c.count:
            continue
        changed = {a for a in ("shape", "colour", "size") if getattr(p_o, a) != getattr(p_c, a)}
        for a in group_o:
            b = min(group_c, key=lambda b: (a.x - b.x) ** 2 + (a.y - b.y) ** 2)
            if max(abs(a.x - b.x), abs(a.y - b.y)) > PLACE_TOLERANCE or any(
                    getattr(a, k) != getattr(b, k) for k in {"shape", "colour", "size"} - changed):
                return False
    return True
