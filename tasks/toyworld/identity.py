"""Truth renders with what made the run: the toy world's own model and the samples' generate settings.

Truth re-renders every sample and reads the selected PNGs back, so its numbers mean something only when
`generate.diffusion` is the folder the toy world's weights assemble into (what `assemble` recorded beside it: the
weights' content and the folder's, unchanged since) with its own VAE, and when the samples were generated under the
generate key truth renders with (`render.sample_unit`: the keyed generate params, every model's content and the code,
which generate records in the samples' parquet metadata, `io.made_by`). Either mismatch is one line before any render.
"""

from __future__ import annotations

import json
from pathlib import Path

from tasks.core.errors import UserError
from tasks.core.fingerprints import content_hash, fingerprint
from tasks.core.io import made_by
from tasks.core.specs import resolve_path
from tasks.image import render
from tasks.image.params import GenerateParams
from tasks.toyworld.params import RECORD


def assembled_from(diffusion: Path) -> dict:
    """What `assemble` recorded beside the diffusion folder `diffusion` (`RECORD`: the weights' and the folder's
    content hashes); {} when nothing readable is there (not a folder the toy world assembled)."""
    try:
        record = json.loads((diffusion.parent / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def check_world_model(params: GenerateParams, toy_world: str) -> None:
    """Raise a one-line `UserError` unless `params` render with the toy world's own VAE and a diffusion folder that is,
    byte for byte, what the toy world's weights `toy_world` (a `tiny_models.toy_world` value) assemble into: the
    folder's content is the one `assemble` recorded beside it, from these weights' content."""
    if params.vae is not None:
        raise UserError(f"truth renders with the toy world's own VAE, not {params.vae.id}: set generate.vae to null")
    weights, found = content_hash(Path(resolve_path(toy_world))), fingerprint(params.diffusion)
    record = assembled_from(Path(params.diffusion.local()))
    if record.get("weights") != weights or found != f"{params.diffusion.id}#{record.get('diffusion')}":
        raise UserError(f"generate.diffusion {params.diffusion.id} ({found}) is not the toy world's weights "
                        f"{toy_world} assembled (weights #{weights}): truth would render with another model than the "
                        "run; point it at the folder `cfgen tiny-models` assembles, or rebuild that folder")


def check_samples(samples: Path, params: GenerateParams, code: tuple[str, ...]) -> None:
    """Raise a one-line `UserError` unless `samples` were generated under the generate key truth renders with
    (`render.sample_unit` of `params`, running the generate stage's `code`)."""
    expected, found = render.sample_unit(params, code).shared, made_by(samples)
    if found != expected:
        raise UserError(f"{samples} was generated under generate key {found or '(none recorded)'}, not {expected}, "
                        "the one truth renders with (other generate params, models or code): rerun `cfgen generate`, "
                        "or run truth with the params it ran with")
