"""Every knob of the engine as one frozen, typed `Params`, resolved by `tasks.config.load_params`: the shared
sections (`tasks.core.params`) and a section per stage, each declared beside its stage's logic.

A field that never changes what a cached unit computes (batch sizes, threads) or applies after the cache is
`unkeyed` (`fields.keyed_dump` leaves it out of cache keys). Under the paper profile every hub model is pinned.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from tasks.core.params import PROFILES, EngineParams, PathsParams
from tasks.core.schemas import EDIT_TYPES
from tasks.core.specs import ClipSpec, ModelSpec, Rooted, model_specs
from tasks.demo.params import SyntheticCocoParams, TinyModelsParams
from tasks.evaluation.params import EvaluateParams
from tasks.image.params import GenerateParams, SelectionParams
from tasks.judge.params import JudgeParams
from tasks.release.params import DatasheetParams, ExportParams, GalleryParams, MixturesParams
from tasks.removal.params import InpaintParams, RemovalCaptionsParams, RemovalMasksParams, RemovalSelectionParams
from tasks.text.params import (
    CandidatesParams,
    PerplexityParams,
    RelationsParams,
    SaliencyParams,
    SimilarityParams,
    SitesParams,
)
from tasks.toyworld.params import TruthParams
from tasks.validation.params import ValidationParams


class Params(Rooted):
    """The whole params file, resolved for `profile`; `root` is the project. Every section is required;
    under `paper` every hub model that runs (not a local path, not `pkg:`, not an open_clip tag; the inpainting model
    only for `fill: inpaint`, the saliency model only when enabled) has a pinned revision; perplexity weighs exactly
    the edit types that run."""

    profile: Literal[PROFILES]
    paths: PathsParams
    engine: EngineParams
    tiny_models: TinyModelsParams
    sites: SitesParams
    saliency: SaliencyParams
    candidates: CandidatesParams
    relations: RelationsParams
    similarity: SimilarityParams
    perplexity: PerplexityParams
    generate: GenerateParams
    selection: SelectionParams
    judge: JudgeParams
    truth: TruthParams
    export: ExportParams
    validation: ValidationParams
    evaluate: EvaluateParams
    mixtures: MixturesParams
    datasheet: DatasheetParams
    gallery: GalleryParams
    synthetic_coco: SyntheticCocoParams
    removal_masks: RemovalMasksParams
    removal_captions: RemovalCaptionsParams
    inpaint: InpaintParams
    removal_selection: RemovalSelectionParams

    @model_validator(mode="before")
    @classmethod
    def _shares_follow_types(cls, data: Any) -> Any:
        """`perplexity.type_shares` weighs exactly the `sites.types` that run: a type without a weight weighs 1; a
        weight for a type that does not run, or for no edit type, is an error (a weight that would silently do
        nothing). So `sites.types` alone chooses the types."""
        if not isinstance(data, dict) or not isinstance(data.get("perplexity", {}), dict):
            return data
        types = (data.get("sites") or {}).get("types", SitesParams.model_fields["types"].default)
        shares = data.get("perplexity", {}).get("type_shares")
        if not isinstance(types, list | tuple) or not isinstance(shares, dict | None):
            return data
        if unknown := sorted(set(shares or {}) - set(EDIT_TYPES)):
            raise ValueError(f"perplexity.type_shares: {', '.join(map(repr, unknown))} is not an edit type (one of "
                             f"{', '.join(EDIT_TYPES)})")
        if idle := sorted(set(shares or {}) - set(types)):
            raise ValueError(f"perplexity.type_shares: {', '.join(map(repr, idle))} does not run (sites.types: "
                             f"{', '.join(types)}): add it there or drop its weight")
        shares = {t: (shares or {}).get(t, 1.0) for t in types}
        return {**data, "perplexity": {**data.get("perplexity", {}), "type_shares": shares}}

    def running_models(self) -> Iterator[tuple[str, ModelSpec]]:
        """(params key, spec) of every model a full run loads: the inpainting model only for `fill: inpaint`, the
        saliency and judge models only when enabled."""
        for key, spec in model_specs(self):
            if not (key == "inpaint.model" and self.inpaint.fill != "inpaint") and not (
                    key == "saliency.model" and not self.saliency.enabled) and not (
                    key == "judge.model" and not self.judge.enabled):
                yield key, spec

    @model_validator(mode="after")
    def _truth_needs_the_toy_world(self) -> Params:
        """The truth stage reads images back into the toy world: with random models its numbers would mean nothing."""
        if self.truth.enabled and self.tiny_models.toy_world is None:
            raise ValueError("truth.enabled needs the toy world's models (tiny_models.toy_world); with random ones "
                             "its truth means nothing: set truth.enabled to false")
        return self

    @model_validator(mode="after")
    def _pinned(self) -> Params:
        if self.profile == "paper":
            unpinned = [f"{key}: hub model {spec.id} has no pinned revision (the paper profile needs one)"
                        for key, spec in self.running_models() if not isinstance(spec, ClipSpec)
                        and spec.revision is None and not spec.id.startswith("pkg:") and not Path(spec.id).exists()]
            if unpinned:
                raise ValueError("; ".join(unpinned))
        return self
