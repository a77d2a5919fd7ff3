"""Provenance: the content identity of every model a dataset was made with and the versions of the libraries its
code calls (no model or model library is loaded)."""

from __future__ import annotations

from tasks.core.code import identity
from tasks.core.fingerprints import fingerprint
from tasks.core.params import Params
from tasks.stages import steps


def model_ids(params: Params) -> dict[str, str]:
    """`model_<role>` -> content identity (`fingerprints.fingerprint`) of every model the dataset was made with (the
    judge's when it is enabled)."""
    specs = {"mlm": params.candidates.model, "sentence_encoder": params.similarity.model,
             "causal_lm": params.perplexity.model, "diffusion": params.generate.diffusion, "vae": params.generate.vae,
             "clip": params.generate.clip, "judge": params.judge.model if params.judge.enabled else None}
    return {f"model_{role}": fingerprint(spec) for role, spec in specs.items() if spec is not None}


def library_versions() -> dict[str, str]:
    """`library_<distribution>` -> installed version of every library the stages' cached units import by name (their
    cache keys hold these and everything they require: `code.identity`)."""
    libraries = identity(*(entry for stage in steps().values() for entry in stage.entries)).imported
    return {f"library_{name}": version for name, version in libraries.items()}


def provenance(params: Params) -> dict[str, str]:
    """The export's provenance columns: `model_ids` then `library_versions`."""
    return {**model_ids(params), **library_versions()}
