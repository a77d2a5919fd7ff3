"""Params sections of the caption stages: sites, saliency, candidates, relations, similarity, perplexity."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from tasks.core.edits import EDIT_TYPES, EditType
from tasks.core.fields import Cosine, PosTag, Unit, unkeyed
from tasks.core.params import Section
from tasks.core.specs import ItmSpec, ModelSpec


class SitesParams(Section):
    """Which edit types run and where each may edit C_o (`tasks.text.sites`); `types: [noun]` is the paper's method."""

    types: tuple[EditType, ...] = Field(("noun",), min_length=1)
    noun_tags: tuple[PosTag, ...] = Field(("NN", "NNS"), description="noun sites (the paper: singular and plural "
                                                                     "common nouns); insert sites precede them")
    lexical_tags: tuple[PosTag, ...] = Field(("JJ", "VBD", "VBG", "VBN", "VBP", "VBZ"),
                                             description="lexical sites: adjectives and verbs, swapped tag for tag")
    delete_grammar: str = Field("PP: {<IN><DT|PRP\\$|CD|JJ.*>*<NN.*>+}",
                                description="NLTK RegexpParser grammar of the deletable phrases (PP chunks)")
    kept_prepositions: tuple[str, ...] = Field(("of",), description="phrases headed by these are never deleted "
                                                                    "(a slice of pizza)")
    max_tokens: int = Field(100, ge=1, description="a caption of more tokens is a reject (`too_long`): COCO's longest "
                                                  "has 50 words, and each token may be a site")


class SaliencyParams(Section):
    """Saliency-chosen edit sites (AutoCAD, Wen et al.): where `paths.source_images` holds a caption's real image I_o
    and the image-text model matches it confidently (`cos(E_T(C_o), E_I(I_o)) >= min_score`), only sites on the top
    `top_share` of its words by ||d s(I_o, C_o) / d e_token|| (a word: the max over its sub-tokens) stay; every other
    caption keeps all its sites. Off, or without source images, the stage passes its sites through."""

    enabled: bool = False
    model: ItmSpec = ItmSpec(id="openai/clip-vit-base-patch32", model_class="CLIPModel")
    top_share: Unit = Field(0.3, gt=0.0, description="pi: the share of a caption's words kept as edit sites")
    min_score: Cosine = Field(0.25, description="rank only captions the model matches at least this well")

    def idle_models(self) -> tuple[str, ...]:
        return () if self.enabled else ("model",)


class CandidatesParams(Section):
    model: ModelSpec
    top_k: int = Field(10, ge=1)
    batch_size: int = unkeyed(64, "masked sites per forward pass", ge=1)
    keep_tags: tuple[PosTag, ...] = Field(("NN", "NNS", "NNP"), description="a noun fill must be tagged one of these")
    insert_tags: tuple[PosTag, ...] = Field(("JJ",), description="an inserted word must be tagged one of these")
    numbers: tuple[str, ...] = Field(("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
                                     min_length=2, description="counting words in order (a / an count as the first): "
                                                               "a quantifier moves one step down and one up")
    quantity_nouns: tuple[str, ...] = Field(
        ("lot", "bunch", "number", "couple", "pair", "group", "herd", "flock", "crowd", "variety", "assortment",
         "collection", "pile", "stack", "cluster", "bundle", "batch", "handful", "dozen", "plenty", "array", "set",
         "series", "team", "fleet", "pack", "swarm", "trio", "abundance", "mixture"),
        description="a quantifier never counts these before `of` (a lot of, a bunch of: quantities, not counts)")


class RelationsParams(Section):
    """Which WordNet relations between the original word and its substitute reject a candidate (`tasks.text.relations`);
    `reject: []` and `reject_human_pairs: false` keep every candidate (the paper's method)."""

    reject: tuple[Literal["synonym", "hyponym", "hypernym"], ...] = ("synonym", "hyponym", "hypernym")
    reject_human_pairs: bool = False
    human_words: tuple[str, ...] = ("girl", "boy", "man", "men", "woman", "guy", "kid", "person", "people", "child",
                                    "children", "couple", "group", "lady")
    wordnet_version: str = "3.0"


class SimilarityParams(Section):
    """Keeps `lower < cos(C_o, C_c) <= upper`, both in [-1, 1]; an edit type of `upper_by_type` has its own upper
    bound (a swap keeps every word, which a sentence embedding barely tells apart: 0.91-1.0 on the demo)."""

    model: ModelSpec
    lower: Cosine = 0.8
    upper: Cosine = 0.91
    upper_by_type: dict[EditType, Cosine] = {"swap": 1.0}
    batch_size: int = unkeyed(128, "sentences per forward pass", ge=1)

    @field_validator("upper")
    @classmethod
    def _above_lower(cls, upper: float, info: ValidationInfo) -> float:
        if "lower" in info.data and not info.data["lower"] < upper:
            raise ValueError(f"must be > lower ({info.data['lower']}), got {upper}")
        return upper

    @field_validator("upper_by_type")
    @classmethod
    def _each_above_lower(cls, uppers: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        if "lower" in info.data and (low := {t: u for t, u in uppers.items() if not info.data["lower"] < u}):
            raise ValueError(f"every upper bound must be > lower ({info.data['lower']}), got {low}")
        return uppers

    def window(self, edit_type: EditType) -> tuple[float, float]:
        return self.lower, self.upper_by_type.get(edit_type, self.upper)


class PerplexityParams(Section):
    """Each caption's C_c is the lowest-perplexity candidate of one edit type, drawn per caption (by a hash of its
    id) with weights `type_shares` among the types it has candidates of (`Params` gives each type that runs one:
    1 unless set)."""

    model: ModelSpec
    type_shares: dict[EditType, Annotated[float, Field(gt=0.0)]] = {"noun": 1.0}
    batch_tokens: int = unkeyed(1024, "about this many tokens per forward pass (tries of one size batched, a row "
                                      "each)", ge=1)
    shared_prefix: bool = unkeyed(True, "compute a token prefix shared by a caption's candidates once; False scores "
                                        "each candidate alone (the reference method; equal within float rounding)")

    @classmethod
    def prepare(cls, section: dict, whole: dict) -> dict:
        """`type_shares` weighs exactly the `sites.types` that run: a type without a weight weighs 1; a weight for a
        type that does not run, or for no edit type, is an error (a weight that would silently do nothing). So
        `sites.types` alone chooses the types."""
        types = (whole.get("sites") or {}).get("types", SitesParams.model_fields["types"].default)
        shares = section.get("type_shares")
        if not isinstance(types, list | tuple) or not isinstance(shares, dict | None):
            return section
        if unknown := sorted(set(shares or {}) - set(EDIT_TYPES)):
            raise ValueError(f"perplexity.type_shares: {', '.join(map(repr, unknown))} is not an edit type (one of "
                             f"{', '.join(EDIT_TYPES)})")
        if idle := sorted(set(shares or {}) - set(types)):
            raise ValueError(f"perplexity.type_shares: {', '.join(map(repr, idle))} does not run (sites.types: "
                             f"{', '.join(types)}): add it there or drop its weight")
        return {**section, "type_shares": {t: (shares or {}).get(t, 1.0) for t in types}}
