"""Human validation flows: Label Studio tasks out (`validation_tasks_flow`), its JSON export back in
(`validation_flow`: Table 1, Fleiss' κ, coverage, the human-validated subset). Partial annotation is normal:
the results say how much was covered, and an export without annotations gives an empty validated subset."""

from __future__ import annotations

import polars as pl
from prefect import flow, get_run_logger

from flows.engine.console import console, show_json
from tasks.core.io import read_frame
from tasks.core.schemas import PAIR_IMAGES, VALIDATED
from tasks.core.writing import write_file, write_frame, write_json, write_text
from tasks.stages import Params
from tasks.validation import agreement, labelstudio


def image_keys(params: Params) -> pl.DataFrame:
    """Every image of the selection as (caption_id, side) (`labelstudio.image_keys`), read from its caption ids."""
    return labelstudio.image_keys(read_frame(params.paths.selected, {"caption_id": pl.String}, "selection"))


@flow(name="validation-tasks")
def validation_tasks_flow(params: Params) -> int:
    """`paths.labelstudio_tasks` (JSON import) and the labeling config beside it (.xml); returns the task count."""
    paths, vp = params.paths, params.validation
    tasks = labelstudio.build_tasks(read_frame(paths.selected, PAIR_IMAGES, "selection"), paths.selected_images,
                                    annotators=vp.annotators, seed=vp.seed, overlap_share=vp.overlap_share,
                                    overlap=vp.overlap, url_prefix=vp.url_prefix)
    write_file(paths.labelstudio_tasks, lambda temporary: temporary.write_bytes(labelstudio.tasks_json(tasks)))
    write_text(paths.labelstudio_tasks.with_suffix(".xml"), labelstudio.LABEL_CONFIG)
    return len(tasks)


def check_export(params: Params) -> None:
    """Before any server starts: the selection is readable and the Label Studio export, when there is one, is an export
    of its images (else one line: the file, the task and what is wrong with it)."""
    paths = params.paths
    images = image_keys(params)
    if paths.labelstudio_export.is_file():
        agreement.check_images(labelstudio.read_export(paths.labelstudio_export), images)


def read_ratings(params: Params) -> pl.DataFrame:
    """The Label Studio export's ratings (`labelstudio.RATINGS`); none before anything is exported, as for an export
    without annotations."""
    export = params.paths.labelstudio_export
    if export.is_file():
        return labelstudio.read_export(export)
    get_run_logger().info("no Label Studio export at %s yet", export)
    return labelstudio.ratings([])


@flow(name="validation")
def validation_flow(params: Params) -> dict:
    """The validation results (`paths.metrics/validation.json`) and the validated caption_ids (`paths.validated`)."""
    paths = params.paths
    ratings = read_ratings(params)
    result = agreement.summary(ratings, image_keys(params), params.validation.overlap)
    validated = agreement.validated(agreement.image_labels(ratings))
    write_frame(pl.DataFrame({"caption_id": validated}, schema=VALIDATED), paths.validated)
    write_json(result, paths.metrics / "validation.json")
    get_run_logger().info("validation: %s rated, %d pairs validated", result["coverage"], len(validated))
    if result["duplicate_annotations"]:
        get_run_logger().warning("validation: %d repeated annotations of an image by one annotator set aside (the "
                                 "latest by updated_at counts)", result["duplicate_annotations"])
    return result


def show_tasks(count: int) -> None:
    console.print(f"{count} tasks written")


def show_results(results: dict) -> None:
    show_json({key: value for key, value in results.items() if key != "disagreements"})
