"""The params every stage shares: the profiles, every path (`PathsParams`) and where stages run (`EngineParams`).
Each stage's own section lives beside its logic (`tasks/<package>/params.py`); `tasks.params.Params` holds them all.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from tasks.core.fields import template, unkeyed
from tasks.core.specs import Frozen

PROFILES = ("demo", "paper")
ImageName = template(image_id=139)  # formatted with an int id where it is all digits, else the id as text


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
    torch_threads: int | None = unkeyed(None, "CPU threads per process (None: torch's default). CPU float results "
                                        "depend on it, so runs compared bit for bit must share it", ge=1, le=1024)
