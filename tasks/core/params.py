"""`Params`: the params every stage shares (the profile, every path, where stages run) and the `Section`s a command
reads (the manifest, `tasks.stages.Sections`, names them; each is declared beside its stage's logic,
`tasks/<package>/params.py`).

A command assembles only the sections it reads (`tasks.config.assemble`): this module imports no section, so an edit
to one stage's section reruns the stages that read it and no other. Under the paper profile every hub model that runs
is pinned.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, cast, get_args

from pydantic import Field, model_validator

from tasks.core.fields import Frozen, Rooted, template_check, unkeyed

if TYPE_CHECKING:  # model specs are imported by the sections that hold models, and where models are asked for
    from tasks.core.specs import ModelSpec

Profile = Literal["demo", "paper"]
PROFILES: tuple[Profile, ...] = get_args(Profile)
# formatted with an int id where it is all digits, else the id as text
ImageName: TypeAlias = Annotated[str, template_check(image_id=139)]


class PathsParams(Frozen):
    """Every file and folder the DAG reads or writes (dvc.yaml interpolates them)."""

    params_checked: Path = Field(Path("data/params.checked"), description="the `params` stage's stamp, which every "
                                 "stage depends on: DVC validates the whole file before any stage")
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
    source_image_name: ImageName = Field("{image_id:0>12}.jpg", description="a real image's file name under "
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
    truth: Path = Field(Path("data/processed/truth.parquet"), description="the toy world's truth of every selected "
                                                                          "pair (`cfgen truth`)")
    truth_samples: Path = Field(Path("data/interim/truth_samples.parquet"), description="... and of every "
                                                                                       "generated sample")


class EngineParams(Frozen):
    """How stages are cut into cached shards and where they run (the shard cache is Prefect's result store)."""

    shard_size: int = unkeyed(64, "average captions per content-defined shard", ge=1)
    dask_address: str | None = unkeyed(None, "a Dask scheduler to map shards over; None runs locally")
    result_storage: str | None = unkeyed(None, "the Prefect result store (shard results, sample records, canonical "
                                         "PNGs): a path every worker sees, relative to the project; None: Prefect's "
                                         "local storage setting (this project's .prefect/storage)")
    task_resources: dict[str, float] = unkeyed({"GPU": 1}, "Dask resources each task holds on its worker: workers "
                                               "offer them (`dask worker --resources GPU=1`); {} for CPU workers")
    torch_threads: int | None = unkeyed(None, "CPU threads per process (None: torch's default); outputs are the same "
                                        "bytes at any count (`tasks.core.batches`)", ge=1, le=1024)


class Section(Frozen):
    """One stage's params section. Its hooks, looked up by `Params` (never branched on by name): `prepare` completes
    its raw mapping from the whole raw params, `idle_models` names its models a run does not load, `check` compares
    it with the other sections assembled beside it, `components` what its diffusers folders' loader reads."""

    @classmethod
    def prepare(cls, section: dict, whole: dict) -> dict:
        return section

    def idle_models(self) -> tuple[str, ...]:
        return ()

    def components(self) -> Mapping[str, tuple[str, ...]]:
        """The components (`tasks.core.layouts`) its diffusers model folders' loader reads besides vae/ (default: an
        SD v1 folder's, as the inpainting model's)."""
        from tasks.core import layouts

        return layouts.SD1

    def check(self, params: Params) -> None:
        """Raise a ValueError when this section contradicts another one in `params` (one that is assembled)."""


SHARED = ("profile", "paths", "engine")


class Params(Rooted):
    """The params file resolved for `profile` (`tasks.config.load_params`): the shared sections and the sections a
    command reads, as fields of an assembled subclass (`tasks.config.assemble`); `root` is the project."""

    profile: Profile
    paths: PathsParams
    engine: EngineParams

    @property
    def sections(self) -> tuple[str, ...]:
        """The sections assembled here, in their order."""
        return tuple(name for name in type(self).model_fields if name not in SHARED)

    @model_validator(mode="before")
    @classmethod
    def _prepared(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {**data, **{name: cast("type[Section]", fields[name].annotation).prepare(data[name], data)
                           for name in fields if name not in SHARED and isinstance(data.get(name), dict)}}

    def running_models(self) -> Iterator[tuple[str, ModelSpec]]:
        """(params key, spec) of every model a run of these sections loads: each section's minus its `idle_models`."""
        from tasks.core.specs import model_specs

        for name in self.sections:
            section = getattr(self, name)
            idle = {f"{name}.{field}" for field in section.idle_models()}
            yield from ((key, spec) for key, spec in model_specs(section, f"{name}.") if key not in idle)

    @model_validator(mode="after")
    def _sections_agree(self) -> Params:
        for name in self.sections:
            getattr(self, name).check(self)
        return self

    @model_validator(mode="after")
    def _pinned(self) -> Params:
        if self.profile == "paper":
            from tasks.core.specs import ClipSpec

            unpinned = [f"{key}: hub model {spec.id} has no pinned revision (the paper profile needs one)"
                        for key, spec in self.running_models() if not isinstance(spec, ClipSpec)
                        and spec.revision is None and not spec.id.startswith("pkg:") and not Path(spec.id).exists()]
            if unpinned:
                raise ValueError("; ".join(unpinned))
        return self
