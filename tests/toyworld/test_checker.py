"""The checker reads rendered ground truth exactly, and fails images that break their caption."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from tasks.toyworld import checker, world

SCENES = [world.sample(random.Random(seed)) for seed in range(400)]


def test_every_rendered_scene_is_read_back_exactly():
    for spec, scene in SCENES:
        image = world.render(scene, 32)
        seen = checker.objects(image)
        assert sorted((o.shape, o.colour, o.size) for o in seen) == sorted((o.shape, o.colour, o.size) for o in scene)
        assert checker.shows(image, spec), world.caption(spec)


def test_captions_round_trip_and_non_world_captions_parse_to_none():
    for spec, _ in SCENES:
        assert world.parse(world.caption(spec)) == spec
    for text in ["A man riding a bicycle.", "A red red circle.", "Two red circle.", "A red circles.",
                 "A red circle above.", "A red circle a blue square.", "A small large circle.", "",
                 "A red circle above a blue square beside a green triangle."]:
        assert world.parse(text) is None, text


def _perturbations(scene: tuple[world.Obj, ...], rng: random.Random):
    """Scenes that break a caption naming every colour and shape of `scene`."""
    k = rng.randrange(len(scene))
    obj = scene[k]
    yield "recoloured", scene[:k] + (replace(obj, colour=rng.choice([c for c in world.COLOURS if c != obj.colour])),) \
        + scene[k + 1:]
    yield "reshaped", scene[:k] + (replace(obj, shape=rng.choice([s for s in world.SHAPES if s != obj.shape])),) \
        + scene[k + 1:]
    yield "removed", scene[:k] + scene[k + 1:]
    corners = [(x, y) for x in (0.15, 0.85) for y in (0.15, 0.85)
               if all(max(abs(o.x - x), abs(o.y - y)) > 0.4 for o in scene)]  # clear of every object
    if corners:
        yield "added", scene + (world.Obj("square", obj.colour, "small", *corners[0]),)


@pytest.mark.parametrize("kind", ["recoloured", "reshaped", "removed", "added"])
def test_a_perturbed_image_fails_its_caption(kind):
    rng, failed, tried = random.Random(kind), 0, 0
    for spec, scene in SCENES[:150]:
        perturbed = dict(_perturbations(scene, rng)).get(kind)
        if perturbed is None:
            continue
        tried += 1
        failed += not checker.shows(world.render(perturbed, 32), spec)
    assert tried > 0 and failed == tried


def test_a_flipped_relation_fails():
    for spec, scene in SCENES:
        if spec.relation in ("above", "below") and (scene[0].shape, scene[0].colour) != (scene[1].shape,
                                                                                         scene[1].colour):
            flipped = replace(spec, relation="below" if spec.relation == "above" else "above")
            assert not checker.shows(world.render(scene, 32), flipped)


def test_noise_below_the_tolerance_is_still_read():
    rng = np.random.default_rng(0)
    for spec, scene in SCENES[:100]:
        noisy = world.render(scene, 32).astype(int) + rng.integers(-25, 26, (32, 32, 3))
        assert checker.shows(np.clip(noisy, 0, 255).astype(np.uint8), spec)


def test_minimal_needs_the_shared_objects_in_place():
    spec_o = world.Spec((world.Phrase(1, "circle", "red"), world.Phrase(1, "square", "blue")), "above")
    spec_c = world.with_phrase(spec_o, 0, shape="triangle")
    square = world.Obj("square", "blue", "small", 0.5, 0.8)
    image_o = world.render((world.Obj("circle", "red", "small", 0.5, 0.2), square), 32)
    image_c = world.render((world.Obj("triangle", "red", "small", 0.5, 0.2), square), 32)
    assert checker.minimal(image_o, image_c, spec_o, spec_c)
    moved = world.render((world.Obj("triangle", "red", "small", 0.5, 0.2), replace(square, x=0.75)), 32)
    assert checker.shows(moved, spec_c) and not checker.minimal(image_o, moved, spec_o, spec_c)
    resized = world.render((world.Obj("triangle", "red", "large", 0.5, 0.25), square), 32)
    assert checker.shows(resized, spec_c) and not checker.minimal(image_o, resized, spec_o, spec_c)
