"""The offline stand-in for COCO val2017 with its instances and captions annotations (the object-removal strategy's
input): `images/<012d id>.png`, `instances.json` and `captions.json` in the real COCO format, with real COCO category
ids and names.

Every object instance is a filled rectangle in its class's colour covering exactly its bbox (an image's later
annotations drawn over its earlier ones) on a plain scene background; images are `size` wide and 3/4, 1 or 5/4 of
that high. The first five images take every branch of the removal rule (`RemovalMasksParams`): a dining table over
> 70% of the image (skipped; the cat on it is removed alone), a frisbee inside a dog (the dog goes with the frisbee,
the frisbee alone), a person and a bicycle overlapping each other by ~60% (both skipped), two cars and nothing else
(removed alone), a dog that no caption names. The others hold 1-4 objects in separate quadrants (each class removed
alone), sometimes two of one class. Each image has 2-3 captions naming its objects by class name or a common synonym;
the first names all of them, later ones sometimes one. The same params give byte-identical files.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple, cast

import numpy as np
from PIL import Image, ImageDraw

from tasks.core.writing import json_text, write_file, write_text
from tasks.demo.params import SyntheticCocoParams


class _Class(NamedTuple):
    """A COCO category, its drawing colour and its caption phrases for one instance and for two."""

    id: int
    supercategory: str
    colour: tuple[int, int, int]
    one: tuple[str, ...]
    two: tuple[str, ...]


CLASSES = {
    "person": _Class(1, "person", (235, 175, 135), ("a man", "a woman", "a person"), ("two people", "two men")),
    "bicycle": _Class(2, "vehicle", (40, 70, 200), ("a bicycle", "a bike", "a blue bike"), ("two bikes",)),
    "car": _Class(3, "vehicle", (200, 30, 30), ("a car", "a red car"), ("two cars", "two red cars")),
    "bench": _Class(15, "outdoor", (120, 70, 30), ("a bench", "a wooden bench"), ("two benches",)),
    "cat": _Class(17, "animal", (95, 95, 95), ("a cat", "a grey cat"), ("two cats",)),
    "dog": _Class(18, "animal", (25, 25, 25), ("a dog", "a black dog"), ("two dogs", "two black dogs")),
    "frisbee": _Class(34, "sports", (250, 225, 30), ("a frisbee", "a yellow disc"), ("two frisbees", "two discs")),
    "dining table": _Class(67, "furniture", (245, 245, 245), ("a table", "a white dining table"), ("two tables",)),
}

# scene: (background colour, where (caption endings), the classes that appear in it)
SCENES = {
    "park": ((85, 160, 70), ("in the park", "on the grass"), ("person", "dog", "frisbee", "bench", "bicycle")),
    "street": ((150, 150, 160), ("on the street", "by the road"), ("person", "car", "bicycle", "dog", "bench")),
    "beach": ((220, 200, 150), ("on the beach", "on the sand"), ("person", "dog", "frisbee")),
    "room": ((180, 140, 100), ("in the kitchen", "in a room"), ("person", "cat", "dog", "dining table")),
}

# The first images: (scene, objects as (class, bbox in fractions of width and height), captions).
FIXED = (
    ("room", (("dining table", (.05, .05, .9, .9)), ("cat", (.3, .25, .25, .25))),
     ("A grey cat sitting on a white dining table.", "A cat on a table in the kitchen.", "A table with a cat on it.")),
    ("park", (("dog", (.1, .2, .6, .6)), ("frisbee", (.35, .35, .15, .15)), ("person", (.75, .1, .2, .8))),
     ("A dog catching a yellow frisbee on the grass.", "A man throwing a disc to his dog.",
      "A black dog with a frisbee in the park.")),
    ("street", (("person", (.1, .15, .5, .7)), ("bicycle", (.3, .15, .5, .7))),
     ("A man riding a blue bike on the street.", "A person on a bicycle by the road.", "A person with a bike.")),
    ("street", (("car", (.05, .4, .4, .3)), ("car", (.55, .45, .4, .3))),
     ("Two red cars parked on the street.", "A red car next to another car.", "Cars parked by the road.")),
    ("park", (("bench", (.1, .5, .45, .3)), ("dog", (.65, .55, .25, .3))),
     ("A wooden bench on the grass.", "An empty bench in the park.", "A bench in a green park.")),
)

Box = tuple[int, int, int, int]
WRITES = re.compile(r"images/\d{12}\.png|instances\.json|captions\.json")
"""Every file `build` writes, as its path in the output folder: a folder holding another is not one it filled."""


def build(output: Path, params: SyntheticCocoParams) -> None:
    """Write `output/images/`, `output/instances.json` and `output/captions.json` (see the module docstring)."""
    rng = np.random.default_rng(params.seed)
    (output / "images").mkdir(parents=True, exist_ok=True)
    objects: list[dict[str, object]]
    captions: list[dict[str, object]]
    images, objects, captions = [], [], []
    for index in range(params.images):
        width, height = params.size, params.size * int(rng.integers(3, 6)) // 4
        if index < len(FIXED):
            scene, layout, fixed = FIXED[index]
            boxes = [(name, _scaled(fractions, width, height)) for name, fractions in layout]
            texts = list(fixed[:rng.integers(2, 4)])
        else:
            scene = list(SCENES)[rng.integers(len(SCENES))]
            boxes = _separate(rng, SCENES[scene][2], width, height)
            texts = _captions(rng, boxes, SCENES[scene][1])
        image = Image.new("RGB", (width, height), SCENES[scene][0])
        draw = ImageDraw.Draw(image)
        for name, (x, y, w, h) in boxes:
            draw.rectangle((x, y, x + w - 1, y + h - 1), fill=CLASSES[name].colour)
        record = {"id": index + 1, "file_name": f"{index + 1:012d}.png", "width": width, "height": height}
        write_file(output / "images" / cast(str, record["file_name"]),
                   lambda temporary: image.save(temporary, format="PNG", compress_level=9))
        images.append(record)
        objects += [{"id": len(objects) + k + 1, "image_id": record["id"], "category_id": CLASSES[name].id,
                     "bbox": [float(v) for v in box], "area": float(box[2] * box[3]), "iscrowd": 0}
                    for k, (name, box) in enumerate(boxes)]
        captions += [{"id": len(captions) + k + 1, "image_id": record["id"], "caption": text}
                     for k, text in enumerate(texts)]
    categories = [{"id": c.id, "name": name, "supercategory": c.supercategory} for name, c in CLASSES.items()]
    _write_json(output / "instances.json", {"images": images, "annotations": objects,
                                            "categories": sorted(categories, key=lambda c: c["id"])})
    _write_json(output / "captions.json", {"images": images, "annotations": captions})


def _scaled(fractions: tuple[float, ...], width: int, height: int) -> Box:
    x, y, w, h = fractions
    return round(x * width), round(y * height), round(w * width), round(h * height)


def _separate(rng: np.random.Generator, classes: tuple[str, ...], width: int, height: int) -> list[tuple[str, Box]]:
    """1-4 objects (sometimes two of one class), each in its own quadrant with a pixel of margin."""
    names = [classes[i] for i in rng.choice(len(classes), int(rng.integers(1, min(4, len(classes)) + 1)),
                                            replace=False)]
    if len(names) < 4 and rng.random() < 0.3:
        names.append(names[rng.integers(len(names))])
    cw, ch = width // 2, height // 2
    boxes = []
    for name, cell in zip(names, rng.permutation(4)):
        w, h = int(rng.integers(cw // 2, cw - 1)), int(rng.integers(ch // 2, ch - 1))
        x = cell % 2 * cw + int(rng.integers(1, cw - w))
        y = cell // 2 * ch + int(rng.integers(1, ch - h))
        boxes.append((name, (x, y, w, h)))
    return boxes


def _captions(rng: np.random.Generator, boxes: list[tuple[str, Box]], places: tuple[str, ...]) -> list[str]:
    """2-3 distinct captions, each class named by one phrase throughout: the first names every class of the image,
    each later one all of them or one."""
    counts = {name: sum(n == name for n, _ in boxes) for name, _ in boxes}
    phrase = {name: _pick(rng, CLASSES[name].two if count == 2 else CLASSES[name].one)
              for name, count in counts.items()}
    texts: list[str] = []
    for _ in range(int(rng.integers(2, 4))):
        while True:
            named = list(counts) if not texts or rng.random() < 0.5 else [list(counts)[rng.integers(len(counts))]]
            text = _sentence(rng, [phrase[named[i]] for i in rng.permutation(len(named))], _pick(rng, places))
            if text not in texts:
                texts.append(text)
                break
    return texts


def _sentence(rng: np.random.Generator, phrases: list[str], place: str) -> str:
    subjects = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]
    templates = [f"{subjects} {place}", f"a photo of {subjects} {place}", f"a picture of {subjects}"]
    if len(phrases) == 2:
        templates += [f"{phrases[0]} next to {phrases[1]}", f"{phrases[0]} near {phrases[1]} {place}"]
    text = _pick(rng, templates)
    return text[0].upper() + text[1:] + "."


def _pick(rng: np.random.Generator, options) -> str:
    return options[rng.integers(len(options))]


def _write_json(path: Path, data: dict) -> None:
    write_text(path, json_text(data, sort_keys=True) + "\n")
