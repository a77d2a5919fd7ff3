"""Provenance: the content identity of every model a dataset was made with (no model is loaded)."""

from __future__ import annotations

from tasks.core.fingerprints import fingerprint
from tasks.core.params import Params


def model_ids(params: Params) -> dict[str, str]:
    """`model_<role>` -> content identity (`fingerprints.fingerprint`) of every model the dataset was made with."""
    specs = {"mlm": params.candidates.model, "sentence_encoder": params.similarity.model,
             "causal_lm": params.perplexity.model, "diffusion": params.generate.diffusion, "vae": params.generate.vae,
             "clip": params.generate.clip}
    return {f"model_{role}": fingerprint(spec) for role, spec in specs.items() if spec is not None}
