"""Image backends: each `generate.backend` name (`BACKEND_NEEDS`) has its class, its declared needs and its tiny
model (`TINY_BACKENDS`), a pair of each goes through the real generate -> selection path, and SD v1 renders the very
pixels it rendered before the backend protocol: sha256 of canonical renders and of Batcher batches (two seeds, with
and without P2P sharing), recorded on the code before the refactor (tiny random SD v1, CPU fp32, one torch thread),
and again when model processes turned oneDNN off (issue 65: its convolutions round by thread count; two of the four
canonical renders and both batches moved in their last pixel levels)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import get_args

import numpy as np
import pytest
import torch

from tasks.core.fields import keyed_dump
from tasks.image import backends, render, selection
from tasks.image.params import BACKEND_NEEDS, GenerateParams
from tasks.image.sampling import Sample
from tasks.tiny.images import TINY_BACKENDS
from tests.conftest import ROOT
from tests.image.fixtures import PAIRS, PASS_ALL, read_png, screen

pytest_plugins = ["tests.image.fixtures"]

CANONICAL = {  # sample -> sha256 of `render.canonical`'s (2, H, W, 3) uint8 pixels, I_o then I_c
    Sample(101, 0.0, 7.5): "f1ac9553782f7cb274d38bf90516d97e26569dae68051466f6c71c1a65e517bb",
    Sample(202, 0.0, 12.0): "25b1de1a400d2eff6474b9d44dd4c7c536c0151f685ba34dfeaf1ab70a9bddf0",
    Sample(101, 0.6, 7.5): "984c0f9429f154b2d5863c51bf1988beb8bd987017252b97159f163913becd79",
    Sample(202, 0.6, 12.0): "1fe5bae45090cd7201eb85a82b6ad2ec2e7bd854b328de69cafad1f5e97c24cf",
}
BATCHED = {  # p2p fraction -> sha256 of the Batcher's one batch of both seeds at that fraction
    0.0: "a7485c5b4c26ca64914c5ba67570fc1e30fb259fe4e461ef410c07901d7c4a2e",
    0.6: "a0dc97183aff1ac2d44f3df136a35e5c10e6e6cf05e03569c3f66fe3e6bb0bb9",
}
RECORD_PATHS = {  # CPU vendor -> the kernel paths that render the records there (read at each library's first op)
    "AuthenticAMD": {},  # where they were made: torch's AVX-512 kernels, MKL's own choice
    "GenuineIntel": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}


def sha256(images: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(images).tobytes()).hexdigest()


def digests(params_json: str) -> dict[str, str]:
    """sha256 of each canonical render (`str(Sample)` keys) and of each p2p fraction's Batcher batch (`batch <p>`),
    rendered at one torch thread (CPU float results depend on how an op is split across threads)."""
    torch.set_num_threads(1)
    params = GenerateParams.model_validate_json(params_json)
    models, pair = render.load_models(params), PAIRS.row(0, named=True)
    found = {str(s): sha256(render.canonical(pair, s, params, models)["images"]) for s in CANONICAL}
    prompts = models.diffusion.encode(pair["caption"], pair["counterfactual"])
    for fraction in BATCHED:
        samples = [s for s in CANONICAL if s.p2p_fraction == fraction]
        [(chunk, rendered)] = render.Batcher(2).render(models.diffusion, prompts, samples, params)
        found[f"batch {fraction}"] = sha256(rendered.images) if chunk == samples else "chunked"
    return found


def test_sd1_renders_the_pixels_it_rendered_before_the_backend_protocol(tiny_params):
    """In a fresh interpreter at the kernel paths that give this CPU's vendor the pixels of 2026-11 (`RECORD_PATHS`):
    left to pick, an Intel Xeon's AVX-512 kernels render the seed-101 samples a pixel level apart from the AMD EPYC
    these records come from; at the AVX2 paths of torch and MKL the Intel renders them and the AMD does not (README,
    "The same bytes from the same inputs")."""
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", Path("/proc/cpuinfo").read_text(), re.M)
    paths = RECORD_PATHS.get(vendor[1] if vendor else "")
    assert paths is not None, f"no record paths for this CPU ({vendor[1] if vendor else 'vendor unknown'})"
    code = "import sys, json; from tests.image.test_backends import digests; print(json.dumps(digests(sys.argv[1])))"
    run = subprocess.run([sys.executable, "-c", code, tiny_params.model_dump_json()], cwd=ROOT,
                         env=os.environ | paths, capture_output=True, text=True, check=True)
    want = {str(s): digest for s, digest in CANONICAL.items()} | {f"batch {p}": d for p, d in BATCHED.items()}
    assert json.loads(run.stdout.splitlines()[-1]) == want


def test_each_backend_name_has_its_class_and_needs_and_is_keyed(tiny_params, image_models):
    names = set(get_args(GenerateParams.model_fields["backend"].annotation))
    assert names == BACKEND_NEEDS.keys() == TINY_BACKENDS.keys()
    for name, needs in BACKEND_NEEDS.items():
        backend = backends.chosen(tiny_params.model_copy(update={"backend": name}))
        assert f"{backend.__module__}:{backend.__qualname__}" == needs.entry
        assert all(callable(getattr(backend, method)) for method in ("load", "steps", "encode", "condition",
                                                                         "denoise"))
    assert keyed_dump(tiny_params)["backend"] == "sd1"
    diffusion = image_models.diffusion
    rows = diffusion.condition(diffusion.encode("a dog", "a cat"), 3, tiny_params.size).states
    assert rows.shape[0] == 3 * tiny_params.needs.rows_per_sample


def test_a_pair_of_each_backend_goes_through_generate_and_selection(backend_params, tmp_path):
    models = render.load_models(backend_params)
    assert f"{type(models.diffusion).__module__}:{type(models.diffusion).__qualname__}" == backend_params.needs.entry
    scores, _, rendered = screen(PAIRS.head(1), backend_params, models)
    evals = backend_params.needs.rows_per_sample * backend_params.steps
    assert rendered == scores.height == backend_params.n_samples and set(scores["unet_evals"]) == {evals}

    def canonical(pairs, samples):
        return [render.canonical(pair, sample, backend_params, models) for pair, sample in zip(pairs, samples)]

    kept, _, _ = selection.run(scores, PASS_ALL, backend_params.black_threshold, canonical, tmp_path)
    [row] = kept.iter_rows(named=True)
    again = render.canonical(PAIRS.row(0, named=True), Sample(row["seed"], row["p2p_fraction"],
                                                              row["guidance_scale"]), backend_params, models)
    images = [read_png(tmp_path / row[name]) for name in ("image_o", "image_c")]
    assert np.array_equal(np.stack(images), again["images"]) and not np.array_equal(*images)
