"""The toy world: scenes of 1–3 flat shapes on a plain background, their COCO-style captions, and their pixels.

A caption is closed-world: it names every object of its scene. Its grammar is `PHRASE [RELATION PHRASE]`, a phrase
being `NUMBER [SIZE] [COLOUR] SHAPE` ("a small red circle above a blue square.", "two yellow triangles."); a size or
colour it leaves out is free. `parse` reads any caption back into a `Spec` (or None when it is not a world caption),
so a counterfactual C_c made by any edit is checkable. Geometry is in units of the image side, so one scene renders
at any size; `render` is exact (no anti-aliasing), which the checker reads back exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import numpy as np

COLOURS = {"red": (220, 40, 40), "green": (40, 190, 70), "blue": (50, 90, 235), "yellow": (235, 215, 40)}
BACKGROUND = (40, 40, 40)
SHAPES = ("circle", "square", "triangle")
SIZES = {"small": 0.25, "large": 0.4}  # side of the object's box / image side
RELATIONS = ("above", "below", "beside")
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
WORDS = {1: "a", 2: "two", 3: "three"}
MARGIN = 0.02  # empty border, in image sides
GAP = 0.08  # between two objects' boxes: over two pixels at 32 px, so regions of one colour never touch
CLEAR = 0.1  # a drawn relation holds by this much (`holds`)


@dataclass(frozen=True)
class Phrase:
    """`count` objects of one `shape`; a None `colour` or `size` is any."""

    count: int
    shape: str
    colour: str | None = None
    size: str | None = None


@dataclass(frozen=True)
class Spec:
    """What a caption claims: its phrases and, between the first and the second, a relation (None with one)."""

    phrases: tuple[Phrase, ...]
    relation: str | None = None


@dataclass(frozen=True)
class Obj:
    shape: str
    colour: str
    size: str
    x: float  # centre, in image sides from the left
    y: float  # centre, in image sides from the top


def holds(relation: str, a: tuple[float, float], b: tuple[float, float], margin: float = 0.0) -> bool:
    """Centre `a` stands in `relation` to centre `b`: mostly vertical for above / below, mostly horizontal beside (by
    more than `margin`: scenes are drawn with `CLEAR`, so a reading of their pixels never falls on the boundary)."""
    dx, dy = a[0] - b[0], a[1] - b[1]
    return {"above": -dy > abs(dx) + margin, "below": dy > abs(dx) + margin,
            "beside": abs(dx) > abs(dy) + margin}[relation]


def caption(spec: Spec) -> str:
    def phrase(p: Phrase) -> str:
        words = [w for w in (WORDS[p.count], p.size, p.colour, p.shape + ("s" if p.count > 1 else "")) if w]
        return " ".join(words)

    text = phrase(spec.phrases[0])
    if spec.relation:
        text += f" {spec.relation} {phrase(spec.phrases[1])}"
    return text[0].upper() + text[1:] + "."


def parse(text: str) -> Spec | None:
    """The `Spec` a caption states, or None when it is no world caption (unknown word, a colour or size given twice,
    a number that disagrees with its noun, a relation without a second phrase)."""
    words = text.lower().rstrip(". ").split()
    phrases: list[Phrase]
    phrases, relation, i = [], None, 0
    while i < len(words):
        if phrases:
            if relation or words[i] not in RELATIONS:
                return None
            relation, i = words[i], i + 1
        if i >= len(words) or words[i] not in NUMBERS:
            return None
        count, attrs, i = NUMBERS[words[i]], {}, i + 1
        while i < len(words) and (words[i] in COLOURS or words[i] in SIZES):
            kind = "colour" if words[i] in COLOURS else "size"
            if kind in attrs:
                return None
            attrs[kind], i = words[i], i + 1
        if i >= len(words):
            return None
        noun = words[i][:-1] if count > 1 else words[i]
        if noun not in SHAPES or (count > 1) != words[i].endswith("s"):
            return None
        phrases.append(Phrase(count, noun, **attrs))
        i += 1
    if not phrases or (relation is None) != (len(phrases) == 1):
        return None
    return Spec(tuple(phrases), relation)


def mask(obj: Obj, size: int) -> np.ndarray:
    """(size, size) bool: the pixels whose centres lie inside `obj`."""
    ys, xs = (np.mgrid[0:size, 0:size] + 0.5) / size
    half = SIZES[obj.size] / 2
    dx, dy = xs - obj.x, ys - obj.y
    if obj.shape == "circle":
        return dx ** 2 + dy ** 2 <= half ** 2
    inside = (abs(dx) <= half) & (abs(dy) <= half)
    if obj.shape == "square":
        return inside
    return inside & (abs(dx) <= (dy + half) / 2)  # triangle: apex up, base down


def render(objects: tuple[Obj, ...], size: int) -> np.ndarray:
    """(size, size, 3) uint8."""
    image = np.empty((size, size, 3), np.uint8)
    image[:] = BACKGROUND
    for obj in objects:
        image[mask(obj, size)] = COLOURS[obj.colour]
    return image


def _related(rng: random.Random, sizes: tuple[str, str], relation: str) -> list[tuple[float, float]]:
    """Centres of two objects in `relation` by CLEAR, GAP apart, drawn directly (no rejection): along the relation's
    axis (y for above / below, x beside) the far one lies `d` beyond the near one, across it within `d - CLEAR`."""
    half = [SIZES[s] / 2 + MARGIN for s in sizes]
    near = 0 if relation == "above" else 1 if relation == "below" else rng.randrange(2)  # nearer the top / left
    far = 1 - near
    d = rng.uniform((SIZES[sizes[0]] + SIZES[sizes[1]]) / 2 + GAP, 1 - half[0] - half[1])
    along = {near: rng.uniform(half[near], 1 - half[far] - d)}
    along[far] = along[near] + d
    offset = rng.uniform(-(d - CLEAR), d - CLEAR)  # far across - near across
    across = {near: rng.uniform(max(half[near], half[far] - offset), min(1 - half[near], 1 - half[far] - offset))}
    across[far] = across[near] + offset
    if relation == "beside":
        return [(along[i], across[i]) for i in (0, 1)]
    return [(across[i], along[i]) for i in (0, 1)]


def _apart(rng: random.Random, sizes: list[str], tries: int = 1000) -> list[tuple[float, float]]:
    """Centres for objects of `sizes` (at most three small ones), their boxes GAP apart, by rejection."""
    for _ in range(tries):
        centres = [(rng.uniform(SIZES[s] / 2 + MARGIN, 1 - SIZES[s] / 2 - MARGIN),
                    rng.uniform(SIZES[s] / 2 + MARGIN, 1 - SIZES[s] / 2 - MARGIN)) for s in sizes]
        if all(max(abs(a[0] - b[0]), abs(a[1] - b[1])) > (SIZES[sa] + SIZES[sb]) / 2 + GAP
               for k, (a, sa) in enumerate(zip(centres, sizes)) for b, sb in zip(centres[k + 1:], sizes[k + 1:])):
            return centres
    raise RuntimeError(f"no placement of {sizes} found in {tries} tries")  # ~1 in 10 draws fails for three small


def sample(rng: random.Random) -> tuple[Spec, tuple[Obj, ...]]:
    """A random caption spec and a scene that shows it. Half the scenes are two related objects, a fifth a counted
    group (two or three, small), the rest one object; the caption names every colour and half the sizes."""
    kind = rng.random()
    if kind < 0.5:
        relation, counts = rng.choice(RELATIONS), [1, 1]
    else:
        relation, counts = None, [rng.choice([2, 3]) if kind < 0.7 else 1]
    phrases, objects = [], []
    for count in counts:
        shape, colour = rng.choice(SHAPES), rng.choice(list(COLOURS))
        size = "small" if count > 1 else rng.choice(list(SIZES))
        phrases.append(Phrase(count, shape, colour, size if rng.random() < 0.5 else None))
        objects += [(shape, colour, size)] * count
    sizes = [s for _, _, s in objects]
    centres = _related(rng, (sizes[0], sizes[1]), relation) if relation else _apart(rng, sizes)
    scene = tuple(Obj(shape, colour, size, *c) for (shape, colour, size), c in zip(objects, centres))
    return Spec(tuple(phrases), relation), scene


def captions(count: int, seed: int) -> list[str]:
    """The captions of `count` scenes drawn from `seed`."""
    rng = random.Random(seed)
    return [caption(sample(rng)[0]) for _ in range(count)]


def with_phrase(spec: Spec, index: int, **change) -> Spec:
    """`spec` with phrase `index` changed (a test's and a perturbation's edit)."""
    phrases = list(spec.phrases)
    phrases[index] = replace(phrases[index], **change)
    return replace(spec, phrases=tuple(phrases))
