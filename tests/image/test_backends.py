"""Image backends: each `generate.backend` name has its class and its declared needs, and SD v1 renders the very
pixels it rendered before the backend protocol: sha256 of canonical renders and of Batcher batches (two seeds, with
and without P2P sharing), recorded on the code before the refactor (tiny random SD v1, CPU fp32, one torch thread)."""

from __future__ import annotations

import hashlib
from typing import get_args

import numpy as np
import pytest
import torch

from tasks.core.fields import keyed_dump
from tasks.image import backends, render
from tasks.image.params import BACKEND_NEEDS, GenerateParams
from tasks.image.sampling import Sample
from tests.image.fixtures import PAIRS

pytest_plugins = ["tests.image.fixtures"]

CANONICAL = {  # sample -> sha256 of `render.canonical`'s (2, H, W, 3) uint8 pixels, I_o then I_c
    Sample(101, 0.0, 7.5): "1fd1144b3dc05717de3f9fcb7e497e76755c9ad97603758b1ee614ee41fc3b29",
    Sample(202, 0.0, 12.0): "25b1de1a400d2eff6474b9d44dd4c7c536c0151f685ba34dfeaf1ab70a9bddf0",
    Sample(101, 0.6, 7.5): "e66fc21c7ba1e98194a0e82e14a3a5275871f1ac7f4e12b430ef72cc4f1944f2",
    Sample(202, 0.6, 12.0): "1fe5bae45090cd7201eb85a82b6ad2ec2e7bd854b328de69cafad1f5e97c24cf",
}
BATCHED = {  # p2p fraction -> sha256 of the Batcher's one batch of both seeds at that fraction
    0.0: "5515bd7f194ad88c040cae7dceeb01b0e0c0e18f75b5293ff33e32cc4fa88186",
    0.6: "b834271c2358dd1d2a6844fb6e508a66eb2339a9f9da3b8d6fcdb58bb5c00f7c",
}


def sha256(images: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(images).tobytes()).hexdigest()


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CPU float results depend on how an op is split across threads
    yield
    torch.set_num_threads(threads)


def test_sd1_renders_the_pixels_it_rendered_before_the_backend_protocol(tiny_params, image_models, one_thread):
    pair = PAIRS.row(0, named=True)
    assert {s: sha256(render.canonical(pair, s, tiny_params, image_models)["images"]) for s in CANONICAL} == CANONICAL
    prompts = image_models.diffusion.encode(pair["caption"], pair["counterfactual"])
    for fraction, digest in BATCHED.items():
        samples = [s for s in CANONICAL if s.p2p_fraction == fraction]
        [(chunk, rendered)] = render.Batcher(2).render(image_models.diffusion, prompts, samples, tiny_params)
        assert chunk == samples and sha256(rendered.images) == digest


def test_each_backend_name_has_its_class_and_needs_and_is_keyed(tiny_params, image_models):
    assert set(get_args(GenerateParams.model_fields["backend"].annotation)) == BACKEND_NEEDS.keys() == {"sd1", "sdxl",
                                                                                                     "sd3"}
    for name, needs in BACKEND_NEEDS.items():
        backend = backends.chosen(tiny_params.model_copy(update={"backend": name}))
        assert f"{backend.__module__}:{backend.__qualname__}" == needs.entry
        assert all(callable(getattr(backend, method)) for method in ("load", "steps", "encode", "condition",
                                                                         "denoise"))
    assert keyed_dump(tiny_params)["backend"] == "sd1"
    diffusion = image_models.diffusion
    rows = diffusion.condition(diffusion.encode("a dog", "a cat"), 3, tiny_params.size)
    assert rows.shape[0] == 3 * tiny_params.needs.rows_per_sample
