"""Params section of the evaluate stage."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from tasks.core.fields import Seed, unkeyed
from tasks.core.params import Section
from tasks.core.specs import ClipSpec, ItmSpec


class EvaluateParams(Section):
    """Zero-shot retrieval R@k and ITM score differences of each model in `models` (name -> spec) on the dataset; a
    cross-encoder ranks a bi-encoder's top `rerank_k` candidates per query."""

    models: dict[str, Annotated[ItmSpec | ClipSpec, Field(union_mode="left_to_right")]]
    ks: tuple[int, ...] = Field((1, 5, 10), description="R@k and ODmAP@k cut-offs")
    odmap_variant: Literal["any", "all"] = Field("any", description="ODmAP relevance: a caption must mention some "
                                                                    "(`all`: every) class still in the image")
    odmap_normalisation: Literal["relevant", "k"] = Field(
        "relevant", description="the headline ODmAP@k divides each query's summed precision by the relevant captions "
                                "in its top k (Musgrave et al.'s mAP@k, which Kim et al. cite) or by k; metrics report "
                                "both")
    seed: Seed = Field(0, description="draws the random other pair (C_r, I_r) of every pair")
    rerank_k: int | None = Field(20, ge=1, description="a cross-encoder ranks each query's top rerank_k candidates "
                                                       "of the `rerank_with` bi-encoder, the rest after them; None "
                                                       "scores every (caption, image) pair (exact, N² passes)")
    rerank_with: str | None = Field(None, description="the bi-encoder of `models` whose top rerank_k the "
                                                      "cross-encoders re-rank; None: the first one listed")
    batch_size: int = unkeyed(64, "a bi-encoder's captions or images per forward pass (a cross-encoder scores "
                              "each pair alone: the same score in any company)", ge=1)

    @staticmethod
    def cross_encoder(spec: ItmSpec | ClipSpec) -> bool:
        """A model scored per (caption, image) pair: an HF spec with `index`; the others embed each apart."""
        return isinstance(spec, ItmSpec) and spec.index is not None

    @property
    def bi_encoders(self) -> list[str]:
        return [name for name, spec in self.models.items() if not self.cross_encoder(spec)]

    def first_stage(self, spec: ItmSpec | ClipSpec) -> ItmSpec | ClipSpec | None:
        """The bi-encoder whose top `rerank_k` the model `spec` re-ranks: None for a bi-encoder or when every pair is
        scored."""
        if self.rerank_k is None or not self.cross_encoder(spec):
            return None
        return self.models[self.rerank_with or self.bi_encoders[0]]

    @model_validator(mode="after")
    def _reranker(self) -> EvaluateParams:
        if self.rerank_with is not None and self.rerank_with not in self.bi_encoders:
            raise ValueError(f"rerank_with: {self.rerank_with!r} is not a bi-encoder of evaluate.models "
                             f"({', '.join(self.bi_encoders) or 'there is none'})")
        if self.rerank_k is not None and self.models and not self.bi_encoders:  # all cross-encoders
            raise ValueError("rerank_k: the cross-encoders of evaluate.models re-rank a bi-encoder's top rerank_k "
                             "and there is none: add one or set rerank_k: null (every pair, N² passes)")
        return self
