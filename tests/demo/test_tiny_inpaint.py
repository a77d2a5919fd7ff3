"""The tiny inpainting stand-in: the same seed gives a byte-identical folder; it loads from disk offline as a
`StableDiffusionInpaintPipeline` with the 9-channel UNet and inpaints a 32x32 image, the same generator seed giving
the same pixels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import StableDiffusionInpaintPipeline
from PIL import Image, ImageDraw

from tasks.core.fingerprints import content_hash
from tasks.demo.tiny_inpaint import build_tiny_inpaint


def test_same_seed_builds_identical_folder(tmp_path):
    hashes = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        build_tiny_inpaint(tmp_path / name, seed)
        hashes[name] = content_hash(tmp_path / name)
    assert hashes["a"] == hashes["b"] != hashes["c"]


@pytest.fixture(scope="module")
def pipe(tmp_path_factory) -> StableDiffusionInpaintPipeline:
    folder = tmp_path_factory.mktemp("tiny_inpaint")
    build_tiny_inpaint(folder, 0)
    pipe = StableDiffusionInpaintPipeline.from_pretrained(folder)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_loads_from_disk_as_an_inpainting_pipeline(pipe):
    assert pipe.unet.config.in_channels == 4 + 1 + 4 and pipe.unet.config.out_channels == 4
    assert pipe.safety_checker is None and pipe.feature_extractor is None
    assert pipe.vae_scale_factor == 8


def test_inpaints_deterministically_per_generator_seed(pipe):
    image = Image.new("RGB", (32, 32), (85, 160, 70))
    ImageDraw.Draw(image).rectangle((8, 8, 23, 23), fill=(25, 25, 25))
    mask = Image.new("L", (32, 32), 0)
    ImageDraw.Draw(mask).rectangle((8, 8, 23, 23), fill=255)

    def inpaint(seed: int) -> np.ndarray:
        return pipe(prompt=["a dog"], image=[image], mask_image=[mask], height=32, width=32, num_inference_steps=2,
                    generator=torch.Generator().manual_seed(seed), output_type="np").images

    first = inpaint(0)
    assert first.shape == (1, 32, 32, 3) and np.isfinite(first).all() and 0 <= first.min() <= first.max() <= 1
    np.testing.assert_array_equal(inpaint(0), first)
    assert not np.array_equal(inpaint(1), first)
