"""Truth checks the model it renders with (`tasks.toyworld.identity`): `cfgen truth` refuses, in one line before any
server or render, a diffusion folder that is not the toy world's weights assembled, a VAE in place of the folder's
own, and samples generated under another generate key than the one truth renders with (or none recorded)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from tasks.core.errors import UserError
from tasks.core.fingerprints import content_hash, fingerprint
from tasks.core.io import write_outputs
from tasks.core.schemas import SAMPLES
from tasks.core.specs import resolve_path
from tasks.image import render
from tasks.stages import stage
from tasks.tiny.images import build_tiny_diffusion
from tasks.toyworld import identity
from tasks.toyworld.assemble import assemble
from tasks.toyworld.params import RECORD
from tests.conftest import project_params
from tests.flows.test_cli import assert_one_error, cfgen, one_row_parquet

TOY_WORLD = "pkg:tasks.toyworld/weights"  # params.yaml's tiny_models.toy_world
SAMPLES_PATH = "data/interim/samples.parquet"  # params.yaml's paths.samples


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A project whose models/demo is the toy world assembled (as `cfgen tiny-models` builds it), with a random SD
    folder beside it."""
    root = tmp_path_factory.mktemp("world")
    assemble(Path(resolve_path(TOY_WORLD)), root / "models/demo")
    build_tiny_diffusion(root / "random_sd", seed=0)
    return root


def write_samples(root: Path, monkeypatch, *overrides: str) -> str:
    """`paths.samples` of the project at `root`, recorded as made under the generate key of its params with
    `overrides`; returns the key."""
    monkeypatch.chdir(root)  # params resolve their model paths here, as a command run in the project does
    key = render.sample_unit(project_params(*overrides).generate, stage("generate").code).shared
    frame = pl.DataFrame(schema=SAMPLES)
    write_outputs(frame, frame, root / SAMPLES_PATH, key)
    return key


def truth(root: Path, *overrides: str):
    return cfgen(root, "truth", "-p", "truth.enabled=true", *(a for o in overrides for a in ("-p", o)))


def test_the_toy_worlds_own_model_and_samples_pass(world, monkeypatch):
    write_samples(world, monkeypatch)
    params = project_params("truth.enabled=true")
    identity.check_world_model(params.generate, params.tiny_models.toy_world)
    identity.check_samples(world / SAMPLES_PATH, params.generate, stage("generate").code)
    record = identity.assembled_from(Path(params.generate.diffusion.local()))
    assert record == {"weights": content_hash(Path(resolve_path(TOY_WORLD))),
                      "diffusion": fingerprint(params.generate.diffusion).split("#")[1]}


def test_a_copy_of_the_assembled_folder_without_its_record_is_refused(tmp_path, world, monkeypatch):
    """The same bytes elsewhere, but nothing says what they were assembled from; a record naming other weights."""
    shutil.copytree(world / "models", tmp_path / "models")
    (tmp_path / "models/demo" / RECORD).unlink()
    write_samples(tmp_path, monkeypatch)
    with pytest.raises(UserError, match="is not the toy world's weights"):
        identity.check_world_model(project_params().generate, TOY_WORLD)
    (tmp_path / "models/demo" / RECORD).write_text(json.dumps(identity.assembled_from(
        world / "models/demo/diffusion") | {"weights": "0" * 16}))
    with pytest.raises(UserError, match="is not the toy world's weights"):
        identity.check_world_model(project_params().generate, TOY_WORLD)


def test_a_random_diffusion_folder_is_refused_in_one_line(world, monkeypatch):
    write_samples(world, monkeypatch, "generate.diffusion.id=random_sd")
    assert_one_error(truth(world, "generate.diffusion.id=random_sd"), "generate.diffusion random_sd",
                     "is not the toy world's weights pkg:tasks.toyworld/weights assembled")


def test_a_changed_file_in_the_assembled_folder_is_refused(tmp_path, world, monkeypatch):
    """The demo's folder, once assembled, then edited (its scheduler's config): no longer the toy world's model."""
    shutil.copytree(world / "models", tmp_path / "models")
    config = tmp_path / "models/demo/diffusion/scheduler/scheduler_config.json"
    config.write_text(config.read_text() + "\n")
    write_samples(tmp_path, monkeypatch)
    with pytest.raises(UserError, match="is not the toy world's weights"):
        identity.check_world_model(project_params().generate, TOY_WORLD)


def test_a_vae_in_place_of_the_folders_own_is_refused(world, monkeypatch):
    write_samples(world, monkeypatch)
    vae = f"generate.vae={{id: {world}/random_sd/vae}}"
    assert_one_error(truth(world, vae), "truth renders with the toy world's own VAE", "set generate.vae to null")


@pytest.mark.parametrize("made_with", [("generate.steps=5",), ("generate.guidance_scale=[1.0, 2.0]",), None],
                         ids=["other-steps", "other-guidance", "no-key"])
def test_samples_of_another_generate_key_are_refused_in_one_line(world, monkeypatch, made_with):
    monkeypatch.chdir(world)
    if made_with is None:
        one_row_parquet(world / SAMPLES_PATH, SAMPLES)  # written before generate recorded its key
    else:
        write_samples(world, monkeypatch, *made_with)
    key = render.sample_unit(project_params().generate, stage("generate").code).shared
    line = assert_one_error(truth(world), f"{SAMPLES_PATH} was generated under generate key", f"not {key}",
                            "rerun `cfgen generate`")
    assert ("(none recorded)" in line) == (made_with is None)
