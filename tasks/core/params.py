"""Every knob of the engine as one frozen, typed `Params` (a section per stage), resolved by `config.load_params`.

A field that never changes what a cached unit computes (batch sizes, threads) or applies after the cache is
`unkeyed` (`fields.keyed_dump` leaves it out of cache keys). Under the paper profile every hub model is pinned.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from tasks.core.caption_params import (
    CandidatesParams,
    PerplexityParams,
    RelationsParams,
    SaliencyParams,
    SimilarityParams,
    SitesParams,
)
from tasks.core.fields import unkeyed
from tasks.core.image_params import GenerateParams, SelectionParams
from tasks.core.release_params import (
    DatasheetParams,
    EvaluateParams,
    ExportParams,
    GalleryParams,
    JudgeParams,
    MixturesParams,
    ValidationParams,
)
from tasks.core.removal_params import (
    InpaintParams,
    RemovalCaptionsParams,
    RemovalMasksParams,
    RemovalSelectionParams,
    SyntheticCocoParams,
)
from tasks.core.schemas import EDIT_TYPES
from tasks.core.specs import ClipSpec, Frozen, ModelSpec, Rooted, model_specs

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
        weight of a type that does not run is dropped (a key that is no edit type is an error, not dropped). So
        `sites.types` alone chooses the types."""
        if not isinstance(data, dict) or not isinstance(data.get("perplexity", {}), dict):
            return data
        types = (data.get("sites") or {}).get("types", SitesParams.model_fields["types"].default)
        shares = data.get("perplexity", {}).get("type_shares")
        if not isinstance(types, list | tuple) or not isinstance(shares, dict | None):
            return data
        if unknown := sorted(set(shares or {}) - set(EDIT_TYPES)):
            raise ValueError(f"perplexity.type_shares: {', '.join(map(repr, unknown))} is not an edit type (one of "
                             f"{', '.join(EDIT_TYPES)})")
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
