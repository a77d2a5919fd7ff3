"""Fixtures for the image-stage tests: each backend's tiny random model (`TINY_BACKENDS`) and a tiny open_clip, built
once per session, loaded for real."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from tasks.core.specs import ClipSpec, ModelSpec
from tasks.image import generate, render
from tasks.image.params import BACKEND_NEEDS, GenerateParams, SelectionParams
from tasks.image.records import PairRecords
from tasks.stages import stage
from tasks.tiny.images import TINY_BACKENDS, TINY_IMAGE_SIZE, build_tiny_clip

PAIRS = pl.DataFrame({
    "caption_id": ["p0", "p1"], "image_id": ["i0", "i1"],
    "caption": ["a dog sitting on a couch", "a red car parked on the street"],
    "counterfactual": ["a cat sitting on a couch", "a red bus parked on the street"],
    "edit_type": ["noun", "noun"], "original_word": ["dog", "car"], "substitute": ["cat", "bus"],
})

PASS_ALL = SelectionParams(min_text_image_o=-1, min_text_image_c=-1, min_image_image=-1, min_clip_dir=-1,
                           min_subject_margin_o=None, min_subject_margin_c=None)


def read_png(path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory) -> Callable[[str], ModelSpec]:
    """A backend's tiny random diffusion folder (`TINY_BACKENDS`, seed 0), built on first use."""
    root = tmp_path_factory.mktemp("tiny_backends")
    return functools.cache(lambda backend: TINY_BACKENDS[backend](root / backend, 0))


@pytest.fixture(scope="session")
def tiny_specs(tiny_folder, tmp_path_factory) -> tuple[ModelSpec, ClipSpec]:
    """The tiny SD v1 folder and the tiny CLIP."""
    return tiny_folder("sd1"), build_tiny_clip(tmp_path_factory.mktemp("tiny_clip"), seed=0)


@pytest.fixture(scope="session")
def tiny_sdxl(tiny_folder, tiny_specs) -> tuple[ModelSpec, ClipSpec]:
    """A tiny random SDXL folder (its own VAE) and the tiny CLIP."""
    return tiny_folder("sdxl"), tiny_specs[1]


@pytest.fixture(scope="session")
def tiny_sd3(tiny_folder, tiny_specs) -> tuple[ModelSpec, ClipSpec]:
    """A tiny random SD3 folder (no T5) and the tiny CLIP."""
    return tiny_folder("sd3"), tiny_specs[1]


@pytest.fixture(scope="session", params=list(BACKEND_NEEDS))
def backend_params(request, tiny_folder, tiny_specs) -> GenerateParams:
    """Tiny-profile params (`make_params`) of each backend (`BACKEND_NEEDS`) on its tiny model."""
    return make_params((tiny_folder(request.param), tiny_specs[1]), backend=request.param)


def make_params(specs: tuple[ModelSpec, ClipSpec], **overrides) -> GenerateParams:
    """Tiny-profile generation params: 32x32 images, 3 steps, 4 samples per pair, 2 per UNet call."""
    diffusion, clip = specs
    values = dict(diffusion=diffusion, vae=None, clip=clip, size=TINY_IMAGE_SIZE, steps=3, n_samples=4,
                  batch_samples=2)
    return GenerateParams(**{**values, **overrides})


@pytest.fixture(scope="session")
def tiny_params(tiny_specs) -> GenerateParams:
    return make_params(tiny_specs)


@pytest.fixture(scope="session")
def image_models(tiny_params) -> render.ImageModels:
    return render.load_models(tiny_params)


def screen(pairs: pl.DataFrame, params: GenerateParams, models: render.ImageModels, cache: PairRecords | None = None,
           selection_params=None) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """`generate.run` over pair records (a fresh folder, removed afterwards, unless given): (scores, rejects, samples
    rendered now)."""
    with tempfile.TemporaryDirectory(prefix="cfgen-records-") as fresh:
        screening = generate.Screening(params, cache or PairRecords(Path(fresh)), models=models,
                                       unit=render.sample_unit(params, stage("generate").code))
        scores, rejects = generate.run(pairs, screening, selection_params)
        return scores, rejects, screening.rendered


@pytest.fixture(scope="session")
def generated(tiny_params, image_models) -> pl.DataFrame:
    """The tiny PAIRS' score table with `tiny_params`."""
    return screen(PAIRS, tiny_params, image_models)[0]
