"""Every knob of the engine as one frozen, typed `Params` (a section per stage), resolved by `config.load_params`.

A field that never changes what a cached unit computes (batch sizes, threads) or applies after the cache is
`unkeyed` (`fields.keyed_dump` leaves it out of cache keys). Under the paper profile every hub model is pinned.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from tasks.core.fields import VAE_FACTOR, Cosine, PosTag, Unit, ordered, unkeyed
from tasks.core.removal_params import (
    InpaintParams,
    RemovalCaptionsParams,
    RemovalMasksParams,
    RemovalSelectionParams,
    SyntheticCocoParams,
)
from tasks.core.schemas import JUDGE_QUESTIONS
from tasks.core.specs import ClipSpec, Frozen, ItmSpec, ModelSpec, Rooted, model_specs

PROFILES = ("demo", "paper")


class PathsParams(Frozen):
    """Every file and folder the DAG reads or writes (dvc.yaml interpolates them)."""

    captions_source: Path
    models: Path
    captions: Path
    sites: Path
    salient_sites: Path
    candidates: Path
    relations: Path
    similarity: Path
    counterfactual_captions: Path
    samples: Path
    selected: Path
    selected_images: Path
    export: Path
    run_metrics: Path
    figures: Path
    plots: Path
    datasheet: Path
    diff: Path
    metrics: Path
    evaluation: Path
    evaluation_reports: Path
    source_images: Path | None = Field(None, description="real images of the source captions (e.g. COCO val2017; a "
                                                         "DVC dep); None or no image there: no real-image baseline")
    labelstudio_tasks: Path = Field(Path("data/validation/tasks.json"), description="Label Studio tasks (+ .xml "
                                                                                   "labeling config beside them)")
    labelstudio_export: Path = Field(Path("data/validation/labelstudio_export.json"),
                                     description="Label Studio's JSON export of the annotations (an input)")
    validated: Path = Field(Path("data/processed/validated.parquet"), description="the human-validated caption_ids")
    judged: Path = Field(Path("data/processed/judged.parquet"), description="the VLM judge's answers and verdict per "
                                                                          "selected pair")
    source_image_name: str = Field("{image_id:0>12}.jpg", description="a real image's file name under "
                                                                       "source_images, from its COCO image_id")
    synthetic_coco: Path
    removal_instances: Path
    removal_captions_source: Path
    removal_images: Path
    class_words: Path | None = Field(None, description="COCO class -> the words naming it in a caption; None: the "
                                                       "list shipped with cfgen (tasks/removal/class_words.yaml)")
    removal_masks: Path
    removal_captions: Path
    removal_gallery: Path
    inpainted: Path
    inpainted_images: Path
    removal_pairs: Path
    removal_export: Path
    gallery: Path = Field(Path("reports/gallery"), description="the static pair gallery (open index.html)")


class EngineParams(Frozen):
    """How stages are cut into cached shards and where they run (the shard cache is Prefect's result store)."""

    shard_size: int = unkeyed(64, "average captions per content-defined shard", ge=1)
    dask_address: str | None = unkeyed(None, "a Dask scheduler to map shards over; None runs locally")
    result_storage: str | None = unkeyed(None, "the Prefect result store (shard results, sample records, canonical "
                                         "PNGs): a path every worker sees, relative to the project; None: Prefect's "
                                         "local storage setting (this project's .prefect/storage)")
    task_resources: dict[str, float] = unkeyed({"GPU": 1}, "Dask resources each task holds on its worker: workers "
                                               "offer them (`dask worker --resources GPU=1`); {} for CPU workers")
    torch_threads: int | None = unkeyed(None, "CPU threads per process (None: torch's default). CPU float results "
                                        "depend on it, so runs compared bit for bit must share it", ge=1)


class TinyModelsParams(Frozen):
    seed: int = 0
    vocab_size: int = Field(1000, ge=300)
    max_length: int = Field(128, ge=16)


EditType = Literal["noun", "lexical", "quantifier", "insert", "delete"]  # schemas.EDIT_TYPES


class SitesParams(Frozen):
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


class SaliencyParams(Frozen):
    """Saliency-chosen edit sites (AutoCAD, Wen et al.): where `paths.source_images` holds a caption's real image I_o
    and the image-text model matches it confidently (`cos(E_T(C_o), E_I(I_o)) >= min_score`), only sites on the top
    `top_share` of its words by ||d s(I_o, C_o) / d e_token|| (a word: the max over its sub-tokens) stay; every other
    caption keeps all its sites. Off, or without source images, the stage passes its sites through."""

    enabled: bool = False
    model: ItmSpec = ItmSpec(id="openai/clip-vit-base-patch32", model_class="CLIPModel")
    top_share: Unit = Field(0.3, gt=0.0, description="pi: the share of a caption's words kept as edit sites")
    min_score: Cosine = Field(0.25, description="rank only captions the model matches at least this well")


class CandidatesParams(Frozen):
    model: ModelSpec
    top_k: int = Field(10, ge=1)
    batch_size: int = unkeyed(64, "masked sites per forward pass", ge=1)
    keep_tags: tuple[PosTag, ...] = Field(("NN", "NNS", "NNP"), description="a noun fill must be tagged one of these")
    insert_tags: tuple[PosTag, ...] = Field(("JJ",), description="an inserted word must be tagged one of these")
    numbers: tuple[str, ...] = Field(("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
                                     min_length=2, description="counting words in order (a / an count as the first): "
                                                               "a quantifier moves one step down and one up")


class RelationsParams(Frozen):
    """Which WordNet relations between the original word and its substitute reject a candidate (`tasks.text.relations`);
    `reject: []` and `reject_human_pairs: false` keep every candidate (the paper's method)."""

    reject: tuple[Literal["synonym", "hyponym", "hypernym"], ...] = ("synonym", "hyponym", "hypernym")
    reject_human_pairs: bool = False
    human_words: tuple[str, ...] = ("girl", "boy", "man", "men", "woman", "guy", "kid", "person", "people", "child",
                                    "children", "couple", "group", "lady")
    wordnet_version: str = "3.0"


class SimilarityParams(Frozen):
    """Keeps `lower < cos(C_o, C_c) <= upper`, both in [-1, 1]."""

    model: ModelSpec
    lower: Cosine = 0.8
    upper: Cosine = 0.91
    batch_size: int = unkeyed(128, "sentences per forward pass", ge=1)

    @field_validator("upper")
    @classmethod
    def _above_lower(cls, upper: float, info: ValidationInfo) -> float:
        if "lower" in info.data and not info.data["lower"] < upper:
            raise ValueError(f"must be > lower ({info.data['lower']}), got {upper}")
        return upper


class PerplexityParams(Frozen):
    """Each caption's C_c is the lowest-perplexity candidate of one edit type, drawn per caption (by a hash of its
    id) with weights `type_shares` among the types it has candidates of (`Params` gives each type that runs one:
    1 unless set)."""

    model: ModelSpec
    type_shares: dict[EditType, Annotated[float, Field(gt=0.0)]] = {"noun": 1.0}
    batch_tokens: int = unkeyed(1024, "tokens per forward pass (whole captions' tries, packed in rows of <= 256)",
                                ge=1)
    shared_prefix: bool = unkeyed(True, "compute a token prefix shared by a caption's candidates once; False scores "
                                        "each candidate alone (the reference method; equal within float rounding)")


class AdaptiveParams(Frozen):
    """Over-generation in rounds of `round_samples`, stopping a pair once `min_accepted` samples pass selection's
    thresholds."""

    enabled: bool = False
    min_accepted: int = Field(1, ge=1)
    round_samples: int = Field(10, ge=1)


class GenerateParams(Frozen):
    """Paired Prompt-to-Prompt sampling. `guidance_scale` and `p2p_fraction` are U(lo, hi) ranges drawn per sample."""

    diffusion: ModelSpec = ModelSpec(id="stable-diffusion-v1-5/stable-diffusion-v1-5")
    vae: ModelSpec | None = Field(ModelSpec(id="stabilityai/sd-vae-ft-mse"),
                                  description="replaces the diffusion folder's vae/ (None keeps it); only its id and "
                                              "revision count: it runs on the diffusion spec's device and dtype")
    clip: ClipSpec = ClipSpec()
    size: int = Field(512, ge=VAE_FACTOR, multiple_of=VAE_FACTOR, description="image height and width in pixels")
    steps: int = Field(100, ge=1, description="Euler-ancestral steps")
    n_samples: int = unkeyed(100, "samples (seeds) per caption pair; each sample is cached alone", ge=1)
    guidance_scale: Annotated[tuple[float, float], AfterValidator(ordered)] = (7.5, 15.0)
    p2p_fraction: Annotated[tuple[Unit, Unit], AfterValidator(ordered)] = (0.1, 0.9)
    subject_prompt: str = Field("a photo of a {word}", description="the both-subjects check's CLIP prompt for a "
                                                                    "swapped noun (`{word}`: C_o's or C_c's)")
    seed: int = 0
    batch_samples: int = unkeyed(4, "samples per UNet call (4 rows each); after a CUDA OOM the halved size is "
                                    "kept for the rest of the process", ge=1)
    pairs_per_task: int = unkeyed(8, "average caption pairs per Prefect task (content-defined, like caption shards): "
                                     "the unit a Dask worker takes", ge=1)
    channels_last: bool = Field(False, description="UNet and VAE in channels_last memory format (GPU tensor cores)")
    compile_unet: bool = Field(False, description="torch.compile the UNet: slow first call, faster steps after")
    black_threshold: int = unkeyed(4, "an image with every pixel <= this is black (applied after the cache)",
                                   ge=0, le=255)
    clip_batch_size: int = unkeyed(32, "images per CLIP forward pass", ge=1)
    adaptive: AdaptiveParams = unkeyed(AdaptiveParams(), "when to stop sampling a pair; each sample is cached alone")


Margin = Annotated[float, Field(ge=-2.0, le=2.0)]  # a difference of two cosines


class SelectionParams(Frozen):
    """CLIP thresholds in [-1, 1], all inclusive (`score >= min`), and the both-subjects check (paper App. A.3: both
    altered subjects shown), exclusive (`margin > min`, so a tie fails); among passing samples the highest clip_dir
    wins."""

    min_text_image_o: Cosine = Field(0.2, description="sim(C_o, I_o)")
    min_text_image_c: Cosine = Field(0.2, description="sim(C_c, I_c)")
    min_image_image: Cosine = Field(0.7, description="sim(I_o, I_c)")
    min_clip_dir: Cosine = Field(0.2, description="cos(E_I(I_c) - E_I(I_o), E_T(C_c) - E_T(C_o))")
    min_subject_margin_o: Margin | None = Field(0.0, description="the both-subjects check on I_o: s(I_o, prompt("
                                                "original)) - s(I_o, prompt(substitute)) must exceed it; None: off")
    min_subject_margin_c: Margin | None = Field(0.0, description="on I_c: s(I_c, prompt(substitute)) - "
                                                "s(I_c, prompt(original)) must exceed it; None: off")

    def thresholds(self) -> dict[str, float]:
        """Score column -> inclusive minimum."""
        return {"sim_text_image_o": self.min_text_image_o, "sim_text_image_c": self.min_text_image_c,
                "sim_image_image": self.min_image_image, "clip_dir": self.min_clip_dir}

    def subject_margins(self) -> dict[str, float]:
        """Subject-margin column -> exclusive minimum, for the checks that are on (a null margin passes: the edit
        swapped no noun)."""
        margins = {"subject_margin_o": self.min_subject_margin_o, "subject_margin_c": self.min_subject_margin_c}
        return {name: minimum for name, minimum in margins.items() if minimum is not None}


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


class Params(Rooted):
    """The whole params file, resolved for `profile`; `root` is the project. Every section is required;
    under `paper` every hub model that runs (not a local path, not `pkg:`, not an open_clip tag; the inpainting model
    only for `fill: inpaint`, the saliency model only when enabled) has a pinned revision; perplexity weighs exactly
    the edit types that run."""

    profile: Literal["demo", "paper"]
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
        """`perplexity.type_shares` weighs exactly the `sites.types` that run: a type without a weight weighs 1, the
        weight of a type that does not run is dropped. So `sites.types` alone chooses the types."""
        if not isinstance(data, dict) or not isinstance(data.get("perplexity", {}), dict):
            return data
        types = (data.get("sites") or {}).get("types", SitesParams.model_fields["types"].default)
        shares = data.get("perplexity", {}).get("type_shares")
        if not isinstance(types, list | tuple) or not isinstance(shares, dict | None):
            return data
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
    def _pinned(self) -> Params:
        if self.profile == "paper":
            unpinned = [f"{key}: hub model {spec.id} has no pinned revision (the paper profile needs one)"
                        for key, spec in self.running_models() if not isinstance(spec, ClipSpec)
                        and spec.revision is None and not spec.id.startswith("pkg:") and not Path(spec.id).exists()]
            if unpinned:
                raise ValueError("; ".join(unpinned))
        return self
