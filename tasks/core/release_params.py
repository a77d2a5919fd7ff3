"""Params sections of the stages after selection: the judge, validation, evaluation, export, mixtures, gallery and
datasheet."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from tasks.core.fields import EditType, Unit, unkeyed
from tasks.core.schemas import JUDGE_QUESTIONS
from tasks.core.specs import ClipSpec, Frozen, ItmSpec, ModelSpec


class JudgeParams(Frozen):
    """The VLM judge (`tasks.judge`): per selected pair four yes/no questions (I_o shows C_o's word? I_c shows C_c's?
    and the two crossed), each answer P(Yes) = softmax over the next-token logits of "Yes" and "No" (no sampling),
    and a verdict from `thresholds` (a question counts as answered yes when P(Yes) >= its threshold). Off unless
    enabled; under the paper profile its hub model needs a pinned revision, like every model that runs."""

    enabled: bool = False
    model: ModelSpec
    templates: dict[EditType, str] = Field(description="the question per edit type; {word}: the original or the "
                                                       "substitute (insert / delete: the inserted / deleted phrase)")
    thresholds: dict[str, Unit] = unkeyed(dict.fromkeys(JUDGE_QUESTIONS, 0.5), "P(Yes) at which each question "
                                          "counts as answered yes (applied after the cache)")
    batch_size: int = unkeyed(4, "questions per forward pass; one task asks one pair's (at most 4)", ge=1)

    @field_validator("templates")
    @classmethod
    def _word_slot(cls, templates: dict[str, str]) -> dict[str, str]:
        if missing := [edit for edit, template in templates.items() if "{word}" not in template]:
            raise ValueError(f"the template of {', '.join(missing)} has no {{word}}")
        return templates

    @field_validator("thresholds")
    @classmethod
    def _every_question(cls, thresholds: dict[str, float]) -> dict[str, float]:
        if set(thresholds) != set(JUDGE_QUESTIONS):
            raise ValueError(f"needs exactly one threshold per question ({', '.join(JUDGE_QUESTIONS)}), got "
                             f"{', '.join(thresholds) or 'none'}")
        return thresholds


class ExportParams(Frozen):
    """The `datasets` folder (parquet shards under data/) and, when `repo_id` is set and HF_TOKEN given, its push."""

    shard_rows: int = Field(500, ge=1, description="rows per parquet shard at most")
    repo_id: str | None = Field(None, description="Hub dataset repo (owner/name) to push to; None never pushes")
    private: bool = True
    license: str = "cc-by-4.0"
    pretty_name: str = "COCO-Counterfactuals (regenerated)"


class EvaluateParams(Frozen):
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
    seed: int = Field(0, description="draws the random other pair (C_r, I_r) of every pair")
    rerank_k: int | None = Field(20, ge=1, description="a cross-encoder ranks each query's top rerank_k candidates "
                                                       "of the `rerank_with` bi-encoder, the rest after them; None "
                                                       "scores every (caption, image) pair (exact, N² passes)")
    rerank_with: str | None = Field(None, description="the bi-encoder of `models` whose top rerank_k the "
                                                      "cross-encoders re-rank; None: the first one listed")
    batch_size: int = unkeyed(64, "captions, images or (caption, image) pairs per forward pass", ge=1)

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


class ValidationParams(Frozen):
    """Human validation in Label Studio (paper §4.1, App. B.3): one task per generated image, its two captions in a
    seeded order; a seeded `overlap_share` of the images goes to `overlap` annotators (for Fleiss' κ), the rest to
    one."""

    seed: int = 0
    overlap_share: Unit = 0.1
    overlap: int = Field(3, ge=1)
    annotators: tuple[str, ...] = ("annotator1", "annotator2", "annotator3")
    url_prefix: str | None = Field(None, description="where the images are served (prefix + store path); None "
                                                     "embeds each PNG in its task as a data URI")


class MixturesParams(Frozen):
    """Training mixtures of real and counterfactual rows (paper App. B.4.1); needs `paths.source_images`."""

    seed: int = Field(0, description="draws the mixtures' rows and the train/validation split")


class GalleryParams(Frozen):
    """The static pair gallery (`cfgen gallery`)."""

    seed: int = Field(0, description="draws the rejected rows shown per stage and reason")


class DatasheetParams(Frozen):
    """What the generated datasheet summarises: the altered-subject table's length and the human-related nouns."""

    top_subjects: int = Field(20, ge=1, description="rows of the altered-subject table (paper Table 10)")
    human_words: tuple[str, ...] = (
        "man", "men", "woman", "women", "person", "people", "boy", "boys", "girl", "girls", "child", "children",
        "kid", "kids", "baby", "babies", "toddler", "teenager", "adult", "adults", "lady", "ladies", "guy", "guys",
        "gentleman", "gentlemen", "player", "players", "skier", "skiers", "surfer", "surfers", "skateboarder",
        "snowboarder", "rider", "riders", "cyclist", "biker", "batter", "pitcher", "catcher", "umpire", "athlete",
        "chef", "cook", "worker", "workers", "officer", "soldier", "soldiers", "doctor", "nurse", "farmer", "student",
        "students", "tourist", "tourists", "passenger", "passengers", "pedestrian", "pedestrians", "crowd", "family",
        "couple", "friends", "mother", "father", "son", "daughter", "wife", "husband", "bride", "groom",
    )
