"""Truth renders with what made the run: the toy world's own model and the samples' generate settings.

Truth re-renders every sample and reads the selected PNGs back, so its numbers mean something only when
`generate.diffusion` is the folder the toy world's weights assemble into (`assemble`: byte-identical for the same
weights, so their fingerprints compare) with its own VAE, and when the samples were generated under the generate
key truth renders with (`render.sample_unit`: the keyed generate params, every model's content and the code, which
generate records in the samples' parquet metadata, `io.made_by`). Either mismatch is one line before any render.
"""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

from tasks.core.errors import UserError
from tasks.core.fingerprints import content_hash, fingerprint
from tasks.core.io import made_by
from tasks.core.specs import resolve_path
from tasks.image import render
from tasks.image.params import GenerateParams


@cache
def _assembled(weights: Path, weights_content: str) -> str:
    """The content hash of the diffusion folder `weights` (of content `weights_content`) assemble into; quietly (a
    check draws no progress bar)."""
    from transformers.utils import logging

    from tasks.toyworld.assemble import assemble

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        with tempfile.TemporaryDirectory() as folder:
            assemble(weights, Path(folder))
            return content_hash(Path(folder) / "diffusion")
    finally:
        if shown:
            logging.enable_progress_bar()


def world_diffusion(weights: Path) -> str:
    """`content_hash` of the diffusion folder the toy world's `weights` assemble into (once per weights' content)."""
    return _assembled(Path(weights), content_hash(Path(weights)))


def check_world_model(params: GenerateParams, toy_world: str) -> None:
    """Raise a one-line `UserError` unless `params` render with the toy world's assembled diffusion folder (weights
    `toy_world`, a `tiny_models.toy_world` value) and its own VAE."""
    if params.vae is not None:
        raise UserError(f"truth renders with the toy world's own VAE, not {params.vae.id}: set generate.vae to null")
    expected, found = world_diffusion(Path(resolve_path(toy_world))), fingerprint(params.diffusion)
    if found != f"{params.diffusion.id}#{expected}":
        raise UserError(f"generate.diffusion {params.diffusion.id} ({found}) is not the toy world's weights "
                        f"{toy_world} assembled (#{expected}): truth would render with another model than the run; "
                        "point it at the folder `cfgen tiny-models` assembles, or rebuild that folder")


def check_samples(samples: Path, params: GenerateParams, code: tuple[str, ...]) -> None:
    """Raise a one-line `UserError` unless `samples` were generated under the generate key truth renders with
    (`render.sample_unit` of `params`, running the generate stage's `code`)."""
    expected, found = render.sample_unit(params, code).shared, made_by(samples)
    if found != expected:
        raise UserError(f"{samples} was generated under generate key {found or '(none recorded)'}, not {expected}, "
                        "the one truth renders with (other generate params, models or code): rerun `cfgen generate`, "
                        "or run truth with the params it ran with")
