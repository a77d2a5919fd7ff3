"""Fixtures for the image-stage tests: tiny random SD v1, SDXL, SD3 and open_clip models built once per session,
loaded for real."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from tasks.core.specs import ClipSpec, ModelSpec
from tasks.image import generate, render
from tasks.image.params import GenerateParams, SelectionParams
from tasks.image.records import PairRecords
from tasks.stages import stage
from tasks.tiny.images import TINY_IMAGE_SIZE, build_tiny_clip, build_tiny_diffusion, build_tiny_sd3, build_tiny_sdxl

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
def tiny_specs(tmp_path_factory) -> tuple[ModelSpec, ClipSpec]:
    root = tmp_path_factory.mktemp("tiny_image_models")
    return build_tiny_diffusion(root / "sd", seed=0), build_tiny_clip(root / "clip", seed=0)


@pytest.fixture(scope="session")
def tiny_sdxl(tiny_specs, tmp_path_factory) -> tuple[ModelSpec, ClipSpec]:
    """A tiny random SDXL folder (its own VAE) and the tiny CLIP."""
    return build_tiny_sdxl(tmp_path_factory.mktemp("tiny_sdxl"), seed=0), tiny_specs[1]


@pytest.fixture(scope="session")
def tiny_sd3(tiny_specs, tmp_path_factory) -> tuple[ModelSpec, ClipSpec]:
    """A tiny random SD3 folder (no T5) and the tiny CLIP."""
    return build_tiny_sd3(tmp_path_factory.mktemp("tiny_sd3"), seed=0), tiny_specs[1]


@pytest.fixture(scope="session", params=["sd1", "sdxl", "sd3"])
def backend_params(request) -> GenerateParams:
    """Tiny-profile params (`make_params`) of each backend on its tiny model."""
    specs = request.getfixturevalue({"sd1": "tiny_specs", "sdxl": "tiny_sdxl", "sd3": "tiny_sd3"}[request.param])
    return make_params(specs, backend=request.param)


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
    """`generate.run` over pair records (a fresh folder unless given): (scores, rejects, samples rendered now)."""
    screening = generate.Screening(params, cache or PairRecords(Path(tempfile.mkdtemp())), models=models,
                                   unit=render.sample_unit(params, stage("generate").code))
    scores, rejects = generate.run(pairs, screening, selection_params)
    return scores, rejects, screening.rendered


@pytest.fixture(scope="session")
def generated(tiny_params, image_models) -> pl.DataFrame:
    """The tiny PAIRS' score table with `tiny_params`."""
    return screen(PAIRS, tiny_params, image_models)[0]
