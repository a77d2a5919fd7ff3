"""Reads an image back into the toy world's terms with plain image analysis (no learned model), and checks captions.

A pixel belongs to the palette colour whose blend with the background it lies on (within `FAR`), when it is at least
half that colour (`COVER`): anti-aliased edges count as a person sees them. The connected regions of one colour are
split at narrow necks (`_parts`: two shapes of one colour that touch) and, from `MIN_AREA` up, are the objects. An
object's shape is read from its colour share upsampled `FINE` times (its edge placed sub-pixel): the template (square,
circle, triangle apex up, fitted to its moments) that overlaps it best by IoU (`_fit`; `blob` when none fits), so a
square with soft corners stays a square; its size is that template's longer side, its place the template's centre.
`reason` names the first fact an image gets wrong; `shows(image, spec)` is exactly `reason(image, spec) is None`.

Invariants: on `world.render`'s images (objects never touch: `world.GAP`) the reading is exact, and stays so under
noise and blur (tests); on generated images it agrees with a person's labels (>= 98% asserted;
`tests/toyworld/fixtures/labelled`, `benchmarks/checker_audit.py`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import combinations
from typing import cast

import numpy as np
from scipy import ndimage

from tasks.toyworld.world import BACKGROUND, COLOURS, SIZES, Phrase, Spec, holds

FAR = 60.0  # RGB distance from a colour's blend line (background to colour) beyond which a pixel is not that colour
COVER = 0.5  # share of its colour (as a blend with the background) from which a pixel belongs to an object
MIN_AREA = 0.008  # of the image (8 px at 32 px): a smaller region is noise (a small rendered triangle is ~0.034)
NECK = 1.5  # two touching objects: their cores reach NECK times deeper than the neck between them
FINE = 4  # an object's shape is read from its colour share upsampled this many times (bilinear): its edge sub-pixel
SHAPE_FIT = 0.78  # IoU with its best template below which a region has no world shape (a bar, a kite): `blob`
SIZE_SPLIT = (SIZES["small"] + SIZES["large"]) / 2
REASONS = ("count", "shape", "colour", "size", "relation", "binding")  # the order `reason` checks the facts in
# box width and height per standard deviation of x and y, and centroid to box centre (up, in heights), per shape
_MOMENTS = {"square": (np.sqrt(12), np.sqrt(12), 0.0), "circle": (4.0, 4.0, 0.0),
            "triangle": (np.sqrt(24), np.sqrt(18), 1 / 6)}
_BACKGROUND = np.array(BACKGROUND, np.float32)
_LINES = np.array(list(COLOURS.values()), np.float32) - _BACKGROUND  # background -> each colour, in RGB
_NAMES = [None, *COLOURS]


@dataclass(frozen=True)
class Seen:
    shape: str
    colour: str
    size: str
    x: float
    y: float


def _fit(part: np.ndarray) -> tuple[str, float, float, float, float]:
    """The shape whose template overlaps `part` best (IoU; `blob` when even that is below SHAPE_FIT), and that
    template's box: width, height, centre x, y (px). A template's box is the one whose shape has `part`'s centroid
    and spread along x and along y; it is drawn as `world.mask` draws (pixel centres inside)."""
    ys, xs = np.nonzero(part)
    cx, cy = xs.mean() + 0.5, ys.mean() + 0.5
    sx, sy = np.sqrt(xs.var() + 1 / 12), np.sqrt(ys.var() + 1 / 12)  # + 1/12: a pixel's own spread
    py, px = np.mgrid[0:part.shape[0], 0:part.shape[1]] + 0.5
    best: tuple[float, str, float, float, float, float] | None = None
    for shape, (kx, ky, lift) in _MOMENTS.items():
        w, h = kx * sx, ky * sy
        x, y = cx, cy - lift * h
        dx, dy = (px - x) / (w / 2), (py - y) / (h / 2)
        template = {"square": (abs(dx) <= 1) & (abs(dy) <= 1), "circle": dx ** 2 + dy ** 2 <= 1,
                    "triangle": (abs(dy) <= 1) & (abs(dx) <= (dy + 1) / 2)}[shape]
        iou = (part & template).sum() / (part | template).sum()
        if best is None or iou > best[0]:
            best = (iou, shape, w, h, x, y)
    assert best is not None  # _MOMENTS is not empty
    return (best[1] if best[0] >= SHAPE_FIT else "blob", *best[2:])


def _parts(region: np.ndarray) -> list[np.ndarray]:
    """One colour's connected region as objects: two shapes that touch meet at a neck, so cutting the region at a
    depth t (its pixels farther than t from its outside) leaves two or more cores each reaching NECK * t deep (and
    at least 2 px); each pixel then goes to its nearest core. A convex region, which every rendered shape is, never
    falls apart so: it stays one object."""
    depth = ndimage.distance_transform_edt(np.pad(region, 1))[1:-1, 1:-1]
    for t in np.arange(1.0, depth.max() / NECK + 1e-9, 0.5):
        cores, n = ndimage.label(depth > t)
        peaks = ndimage.maximum(depth, cores, range(1, n + 1))
        kept = [i for i, peak in enumerate(np.atleast_1d(peaks), start=1) if peak >= max(NECK * t, 2.0)]
        if len(kept) >= 2:
            seeds = np.where(np.isin(cores, kept), cores, 0)
            owner = seeds[tuple(ndimage.distance_transform_edt(seeds == 0, return_distances=False,
                                                               return_indices=True))]
            return [region & (owner == i) for i in kept]
    return [region]


def objects(image: np.ndarray) -> list[Seen]:
    """The objects of an (H, W, 3) uint8 image, top to bottom then left to right."""
    h, w, _ = image.shape
    offset = image.astype(np.float32) - _BACKGROUND
    alpha = offset @ _LINES.T / (_LINES ** 2).sum(1)  # each colour's share, were the pixel a blend with the background
    off_line = np.linalg.norm(offset[:, :, None, :] - alpha[..., None] * _LINES, axis=-1)
    nearest = off_line.argmin(-1)
    keep = (np.take_along_axis(off_line, nearest[..., None], -1)[..., 0] <= FAR) & (
        np.take_along_axis(alpha, nearest[..., None], -1)[..., 0] >= COVER)
    label = np.where(keep, nearest + 1, 0)
    seen = []
    for index in range(1, len(_NAMES)):
        regions, n = ndimage.label(label == index)
        for k in range(1, n + 1):
            for part in _parts(regions == k):
                if part.sum() < MIN_AREA * h * w:
                    continue
                near = ndimage.binary_dilation(part) & ((label == 0) | part)  # its pixels and its edge's
                fine = ndimage.zoom(np.where(near, np.clip(alpha[..., index - 1], 0, 1), 0), FINE, order=1,
                                    grid_mode=True, mode="grid-constant") >= COVER
                shape, *box = _fit(fine)
                bw, bh, x, y = (v / FINE for v in box)
                seen.append(Seen(shape, cast(str, _NAMES[index]),
                                 "large" if max(bh / h, bw / w) > SIZE_SPLIT else "small", float(x / w), float(y / h)))
    return sorted(seen, key=lambda s: (round(s.y, 2), s.x))


def _splits(seen: list[Seen], spec: Spec, fits) -> list[list[Seen]] | None:
    """`seen` split into the spec's phrases (each its count of objects that `fits` it, every object used once) such
    that the relation holds between every object of the first phrase and every one of the second, or None."""
    counts = [p.count for p in spec.phrases]
    if sum(counts) != len(seen):
        return None
    for first in combinations(range(len(seen)), counts[0]):
        groups = [[seen[i] for i in first], [o for i, o in enumerate(seen) if i not in first]][:len(counts)]
        if all(fits(o, p) for group, p in zip(groups, spec.phrases) for o in group) and (
                spec.relation is None or all(holds(spec.relation, (a.x, a.y), (b.x, b.y))
                                             for a in groups[0] for b in groups[1])):
            return groups
    return None


def _fits(obj: Seen, phrase: Phrase) -> bool:
    return obj.shape == phrase.shape and phrase.colour in (None, obj.colour) and phrase.size in (None, obj.size)


def assign(seen: list[Seen], spec: Spec) -> list[list[Seen]] | None:
    """`seen` split into the spec's phrases (each its count of matching objects, every object used once) such that the
    relation holds between the first and the second phrase, or None when no split does."""
    return _splits(seen, spec, _fits)


def _matched(seen: list[Seen], spec: Spec, attribute: str) -> bool:
    """The objects' values of `attribute` cover what the phrases state of it (as many objects as the spec has)."""
    have = Counter(getattr(o, attribute) for o in seen)
    return all(have[value] >= need for value, need in sum(
        (Counter({getattr(p, attribute): p.count}) for p in spec.phrases if getattr(p, attribute)), Counter()).items())


def first_failure(seen: list[Seen], spec: Spec) -> str | None:
    """None when the objects `seen` are exactly what `spec` states, else the first fact that fails, in `REASONS`
    order (GenEval-style): `count` (objects in all), `shape` (the shapes, as a multiset), `colour` and `size` (the
    values stated, each attribute alone), `relation` (objects identified by shape alone), `binding` (the colours and
    sizes are there but on the wrong objects)."""
    if len(seen) != sum(p.count for p in spec.phrases):
        return "count"
    for attribute in ("shape", "colour", "size"):
        if not _matched(seen, spec, attribute):
            return attribute
    if _splits(seen, spec, lambda o, p: o.shape == p.shape) is None:
        return "relation"
    return None if assign(seen, spec) is not None else "binding"


def reason(image: np.ndarray, spec: Spec | None) -> str | None:
    """Why the image does not show `spec`: `first_failure` of its objects, `no_world_caption` for a None spec; None
    when it shows it (`shows`)."""
    return "no_world_caption" if spec is None else first_failure(objects(image), spec)


def shows(image: np.ndarray, spec: Spec | None) -> bool:
    """The image shows exactly what `spec` states (a None spec, no world caption, is shown by nothing)."""
    return reason(image, spec) is None
