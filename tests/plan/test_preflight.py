"""The pre-flight reads a diffusion folder's components from its backend's declared needs (`BACKEND_NEEDS`)."""

from __future__ import annotations

import shutil

from tasks.core.specs import ModelSpec
from tasks.plan import preflight
from tests.image.fixtures import make_params

pytest_plugins = ["tests.image.fixtures"]


def test_an_sdxl_folder_lacking_its_second_text_encoder_is_named_for_sdxl_only(tiny_sdxl, tmp_path):
    folder = tmp_path / "sdxl"
    shutil.copytree(tiny_sdxl[0].id, folder)
    params = make_params((ModelSpec(id=str(folder)), tiny_sdxl[1]), backend="sdxl")
    assert preflight.incomplete(params) == []
    shutil.rmtree(folder / "text_encoder_2")
    [line] = preflight.incomplete(params)
    assert "has no text_encoder_2/" in line and "text_encoder_2/, tokenizer/" in line
    assert preflight.incomplete(params.model_copy(update={"backend": "sd1"})) == []  # SD v1 reads no second encoder
