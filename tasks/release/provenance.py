"""Provenance: the content identity and the license of every model a dataset was made with and the versions of the
libraries its code calls (no model or model library is loaded)."""

from __future__ import annotations

from tasks.core.code import identity
from tasks.core.fingerprints import cached_file, fingerprint, is_hub_id
from tasks.core.licenses import License, card_license, named
from tasks.core.specs import ModelSpec
from tasks.stages import Params, steps


def models_used(params: Params) -> dict[str, ModelSpec]:
    """Role -> spec of every model the dataset was made with (the judge's when it is enabled)."""
    specs = {"mlm": params.candidates.model, "sentence_encoder": params.similarity.model,
             "causal_lm": params.perplexity.model, "diffusion": params.generate.diffusion, "vae": params.generate.vae,
             "clip": params.generate.clip, "judge": params.judge.model if params.judge.enabled else None}
    return {role: spec for role, spec in specs.items() if spec is not None}


def model_ids(params: Params) -> dict[str, str]:
    """`model_<role>` -> content identity (`fingerprints.fingerprint`) of every model in `models_used`."""
    return {f"model_{role}": fingerprint(spec) for role, spec in models_used(params).items()}


def license_of(spec: ModelSpec, default: str | None = None) -> License:
    """The license `spec` comes under: the one it names; else its model card's (README.md in its folder, or in its
    hub snapshot in the local cache); else `default` (its image backend's); else unstated, with its hub page."""
    if spec.license is not None:
        return named(spec.license)
    card = cached_file(spec, "README.md")
    if card is not None and (found := card_license(card.parent)) is not None:
        return found
    if default is not None:
        return named(default)
    return License("not stated by its spec or a model card",
                   f"https://huggingface.co/{spec.id}" if is_hub_id(spec.id) else None)


def model_licenses(params: Params) -> dict[str, License]:
    """Role -> license of every model in `models_used` (the diffusion model's default: `generate.backend`'s)."""
    defaults = {"diffusion": params.generate.needs.license}
    return {role: license_of(spec, defaults.get(role)) for role, spec in models_used(params).items()}


def library_versions() -> dict[str, str]:
    """`library_<distribution>` -> installed version of every library the stages' cached units import by name (their
    cache keys hold these and everything they require: `code.identity`)."""
    libraries = identity(*(entry for stage in steps().values() for entry in stage.entries)).imported
    return {f"library_{name}": version for name, version in libraries.items()}


def provenance(params: Params) -> dict[str, str]:
    """The export's provenance columns: `model_ids` then `library_versions`."""
    return {**model_ids(params), **library_versions()}
