"""The inpaint stage: one Prefect task per edit, keyed by the real image's bytes, the edit (boxes, removed classes,
prompts), the inpaint params its fill reads, the model's content (for the `inpaint` fill) and the code, so a rerun
fills only edits never seen and a killed run resumes from the ones it had finished. Its PNGs are built beside
`paths.inpainted_images` and published with its table (`publish_folder`), so a run killed at any point leaves
every PNG the table in place names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
from prefect import flow

from flows.engine.caching import in_store, unit_task
from flows.engine.progress import StageProgress
from flows.engine.sharding import LocalTaskRunner
from flows.removal import finish
from tasks.core import keys
from tasks.core.fields import keyed_dump
from tasks.core.images import UnreadableImage, file_inside, read_rgb
from tasks.core.io import read_frame
from tasks.core.loading import set_torch_threads
from tasks.core.publication import STORED_PNG, held_folder, publish_folder
from tasks.core.schemas import INPAINTED, INPAINTED_REJECTS, REMOVAL_CAPTIONS
from tasks.image.store import write_png
from tasks.removal import inpaint
from tasks.removal.params import InpaintParams
from tasks.stages import Params

CODE = (inpaint.fill, inpaint.load_models)  # taken as declared: a patched name keys the same code
EDIT_FIELDS = ("image_id", "width", "height", "removed", "boxes", "caption_id", "edited_caption")


def fill_unit(params: InpaintParams) -> keys.Unit:
    """The fill's params (`inpaint.read_fields`), its model (the `inpaint` fill's only) and the code."""
    model = [params.model] if params.fill == "inpaint" else []
    read = {name: value for name, value in keyed_dump(params).items() if name in inpaint.read_fields(params.fill)}
    return keys.unit("inpaint", CODE, read, model)


def edit_content(image_0: str, edit: dict) -> str:
    """The real image's store path (a hash of its pixels) + the edit."""
    return keys.digest(image_0, json.dumps({k: edit[k] for k in EDIT_FIELDS}, sort_keys=True))


@unit_task
def fill_edit(source: Path, edit: dict, params: InpaintParams, unit: keys.Unit, content: str) -> np.ndarray:
    """I_1 of one edit (`inpaint.fill`); cached by content. One CPU thread whatever `engine.torch_threads`: the
    pipeline's VAE normalises one image over few groups, and torch's GroupNorm then splits each group's sums
    across threads, so its pixels would follow the thread count."""
    set_torch_threads(1)
    return inpaint.fill(read_rgb(source), edit, params, inpaint.load_models(params))


def _readable(edit: dict, folder: Path) -> str | None:
    """The reject reason of an edit whose real image cannot be used (not a file inside `folder`, not decodable whole,
    another size than the annotations say), else None."""
    path = file_inside(folder, edit["file_name"])
    if path is None:
        return "image_missing"
    try:
        height, width, _ = read_rgb(path).shape
    except UnreadableImage as err:
        return err.reason
    return None if (width, height) == (edit["width"], edit["height"]) else "size_mismatch"


@flow(name="inpaint", task_runner=LocalTaskRunner(max_workers=1))  # type: ignore[arg-type]  # prefect#16938
def inpaint_flow(params: Params) -> dict:
    """I_0 (the real image) and I_1 of every edited caption, both stored under `paths.inpainted_images`."""
    paths, section = params.paths, params.inpaint
    edits = read_frame(paths.removal_captions, REMOVAL_CAPTIONS, "removal_captions")
    reasons = [_readable(e, paths.removal_images) for e in edits.iter_rows(named=True)]
    usable = edits.filter(pl.Series([r is None for r in reasons]))
    rejects = edits.with_columns(reason=pl.Series(reasons, dtype=pl.String), stage=pl.lit("inpaint")) \
        .filter(pl.col("reason").is_not_null()).select(list(INPAINTED_REJECTS))
    rows = list(usable.iter_rows(named=True))
    sources = [paths.removal_images / e["file_name"] for e in rows]
    with held_folder(paths.inpainted_images, paths.inpainted, STORED_PNG) as staged:
        image_0, contents = {}, []
        for source, edit in zip(sources, rows):
            if source not in image_0:
                original = read_rgb(source)
                image_0[source] = write_png(staged, original)
            contents.append(edit_content(image_0[source], edit))
        image_1 = []
        with StageProgress("inpaint", len(rows), unit="edits") as progress:
            fill = in_store(fill_edit, params)
            unit = fill_unit(section)
            futures = [fill.submit(s, e, section, unit, c)
                       for s, e, c in zip(sources, rows, contents)]
            for future in futures:
                image_1.append(write_png(staged, future.result()))
                progress.advance()
        kept = usable.with_columns(fill=pl.lit(section.fill),
                                   image_0=pl.Series([image_0[s] for s in sources], dtype=pl.String),
                                   image_1=pl.Series(image_1, dtype=pl.String)).select(list(INPAINTED))
        computed = sum(f.state.name != "Cached" for f in futures)
        return publish_folder(staged, paths.inpainted_images, lambda: finish(
            "inpaint", edits.height, kept, rejects, paths.inpainted, params, edits_filled=computed,
            edits_cached=len(futures) - computed), STORED_PNG)
