"""The pre-flight reads a diffusion folder's components from its backend's declared needs (`BACKEND_NEEDS`)."""

from __future__ import annotations

import shutil

import pytest

from tasks.core.specs import ModelSpec
from tasks.plan import preflight
from tests.image.fixtures import make_params

pytest_plugins = ["tests.image.fixtures"]


@pytest.mark.parametrize(("backend", "denoiser", "sd1_line"), [("sdxl", "unet", None),
                                                                 ("sd3", "transformer", "has no unet/")])
def test_a_folder_lacking_its_second_text_encoder_is_named_for_its_backend(backend, denoiser, sd1_line, request,
                                                                           tmp_path):
    """An SD3 folder is complete without text_encoder_3/ (T5 is optional: the pipeline's zeros)."""
    specs = request.getfixturevalue(f"tiny_{backend}")
    folder = tmp_path / backend
    shutil.copytree(specs[0].id, folder)
    params = make_params((ModelSpec(id=str(folder)), specs[1]), backend=backend)
    assert preflight.incomplete(params) == []
    shutil.rmtree(folder / "text_encoder_2")
    [line] = preflight.incomplete(params)
    assert "has no text_encoder_2/" in line and f"reads {denoiser}/, text_encoder/, text_encoder_2/, tokenizer/" in line
    sd1 = preflight.incomplete(params.model_copy(update={"backend": "sd1"}))  # SD v1 reads no second encoder
    assert sd1 == [] if sd1_line is None else sd1_line in sd1[0]
