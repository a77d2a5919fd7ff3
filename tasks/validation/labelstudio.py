"""Label Studio round trip of the human validation (paper §4.1, App. B.3): tasks out, ratings back in.

One task per generated image (I_o and I_c apart): the image and its pair's two captions C_o, C_c shown as "A" and
"B" in a seeded order; the annotator picks the caption that describes the image, both, or neither. `data.own` says
which of A/B is the image's own caption (C_o for I_o, C_c for I_c), so an export is scored without the selection.
Every seeded draw hashes (seed, caption_id, side, purpose): an image's caption order, overlap membership and
annotators never depend on which other pairs are exported.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.errors import UserError
from tasks.core.images import stored_file, stored_name
from tasks.core.schemas import Schema
from tasks.core.writing import json_text

CHOICES_NAME = "match"
LABEL_CONFIG = f"""<View>
  <Image name="image" value="$image"/>
  <Header value="Which caption describes the image?"/>
  <Header value="Caption A" size="5"/>
  <Text name="caption_a" value="$caption_a"/>
  <Header value="Caption B" size="5"/>
  <Text name="caption_b" value="$caption_b"/>
  <Choices name="{CHOICES_NAME}" toName="image" choice="single" required="true">
    <Choice value="caption A"/>
    <Choice value="caption B"/>
    <Choice value="both"/>
    <Choice value="neither"/>
  </Choices>
</View>
"""
CHOICES = ("own", "other", "both", "neither")  # a rating's `choice`, relative to the rated image
SIDES = {"o": ("image_o", "caption", "counterfactual"),  # side -> (image column, own caption, other caption)
         "c": ("image_c", "counterfactual", "caption")}
RATINGS: Schema = {"caption_id": pl.String, "side": pl.String, "annotator": pl.String, "choice": pl.String,
                   "annotations": pl.Int64}  # annotations: how many the annotator submitted of the image (>1: repeats)
SUBMITTED: Schema = {**{k: v for k, v in RATINGS.items() if k != "annotations"}, "updated_at": pl.Datetime("us", "UTC")}
IMAGES: Schema = {"caption_id": pl.String, "side": pl.String}


class ExportError(UserError):
    """A file that is not a Label Studio JSON export of tasks built by `build_tasks`."""


def _unit(seed: int, *key: str) -> float:
    """A uniform draw in [0, 1) fixed by (seed, key) alone."""
    digest = hashlib.blake2b("\0".join((str(seed), *key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def image_uri(relative: str, images_dir: Path | None, url_prefix: str | None = None) -> str:
    """`url_prefix + relative` when a prefix is given (no file is read), else the PNG under `images_dir` embedded as a
    base64 data URI; either way `relative` is a stored name (`stored_file`: inside `images_dir`)."""
    if url_prefix:
        return url_prefix + stored_name(relative)
    if images_dir is None:
        raise UserError("no images folder to embed images from: give one, or a URL prefix the images are served at")
    path = stored_file(Path(images_dir), relative)
    if not path.is_file():
        raise UserError(f"image {path} does not exist: pass the images folder the selection was written with")
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def build_tasks(selected: pl.DataFrame, images_dir: Path | None, *, annotators: Sequence[str], seed: int,
                overlap_share: float = 0.1, overlap: int = 3, url_prefix: str | None = None) -> list[dict[str, Any]]:
    """Two tasks per selected pair (`SELECTED` schema), sorted by (caption_id, side). An image is in the overlap set
    with probability `overlap_share` and then goes to `overlap` distinct annotators, else to one. Label Studio OSS
    cannot assign tasks (its import sets every task's overlap from the project), so `data.annotators` names them,
    comma-separated: each annotator filters the Data Manager on it."""
    if len(set(annotators)) < overlap:
        raise UserError(f"the overlap set needs {overlap} distinct annotators, got {sorted(set(annotators))}")
    if not 0 <= overlap_share <= 1:
        raise UserError(f"overlap_share must be in [0, 1], got {overlap_share}")
    tasks = []
    for row in selected.sort("caption_id").iter_rows(named=True):
        for side, (image_column, own, other) in SIDES.items():
            key = (row["caption_id"], side)
            own_first = _unit(seed, *key, "order") < 0.5
            n = overlap if _unit(seed, *key, "overlap") < overlap_share else 1
            assigned = sorted(set(annotators), key=lambda name: _unit(seed, *key, "annotator", name))[:n]
            caption_a, caption_b = (row[own], row[other]) if own_first else (row[other], row[own])
            data = {"image": image_uri(row[image_column], images_dir, url_prefix), "caption_a": caption_a,
                    "caption_b": caption_b, "own": "A" if own_first else "B", "caption_id": row["caption_id"],
                    "image_id": row["image_id"], "side": side, "annotators": ",".join(sorted(assigned))}
            tasks.append({"data": data})
    return tasks


def tasks_json(tasks: list[dict[str, Any]]) -> bytes:
    """The tasks as Label Studio's JSON import format; equal tasks give equal bytes."""
    return (json_text(tasks, sort_keys=True, ensure_ascii=False, indent=1) + "\n").encode()


def image_keys(selected: pl.DataFrame) -> pl.DataFrame:
    """Every image of the selection as (caption_id, side), in `build_tasks` order: what coverage counts."""
    ids = selected["caption_id"].unique().sort().to_list()
    return pl.DataFrame([(caption_id, side) for caption_id in ids for side in SIDES], schema=IMAGES, orient="row")


def _annotator(completed_by: Any) -> str:
    """Label Studio writes a user id, or with some export options a user object."""
    if isinstance(completed_by, dict):
        completed_by = completed_by.get("email") or completed_by["id"]
    if isinstance(completed_by, bool) or not isinstance(completed_by, int | str):
        raise ValueError(f"completed_by {completed_by!r} is not a user")
    return str(completed_by)


def _updated_at(annotation: dict) -> datetime | None:
    """When the annotation was last changed (Label Studio's `updated_at`, else `created_at`), as UTC; None if absent."""
    value = annotation.get("updated_at") or annotation.get("created_at")
    if value is None:
        return None
    when = datetime.fromisoformat(value)  # a non-string or a malformed time is a ValueError / TypeError: not an export
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _choice(label: str, own: str) -> str:
    """A Label Studio choice ("caption A", ...) as what it says of the image: own, other, both or neither."""
    if label in ("caption A", "caption B"):
        return "own" if label[-1] == own else "other"
    if label in ("both", "neither"):
        return label
    raise ValueError(f"choice {label!r} is not in the labeling config")


def _task_ratings(task: Any) -> list[dict[str, Any]]:
    data = task["data"]
    own, side = data["own"], data["side"]
    if own not in ("A", "B") or side not in SIDES:
        raise ValueError(f"data.own={own!r}, data.side={side!r}: expected A/B and o/c")
    rows = []
    for annotation in task.get("annotations") or []:
        if not isinstance(annotation.get("was_cancelled", False), bool):
            raise ValueError(f"was_cancelled {annotation['was_cancelled']!r} is not true or false")
        if annotation.get("was_cancelled"):
            continue
        labels = [label for result in annotation.get("result") or [] if result.get("from_name") == CHOICES_NAME
                  for label in result["value"]["choices"]]
        if not labels:
            continue
        if len(labels) != 1:
            raise ValueError(f"annotation {annotation.get('id')} has choices {labels!r}, expected one")
        rows.append({"caption_id": str(data["caption_id"]), "side": side,
                     "annotator": _annotator(annotation["completed_by"]), "choice": _choice(labels[0], own),
                     "updated_at": _updated_at(annotation)})
    return rows


def ratings(export: Any, source: str = "export") -> pl.DataFrame:
    """`RATINGS` rows, one per (image, annotator) with a submitted annotation with a choice; skipped, empty and absent
    annotations give none. `annotator` is Label Studio's `completed_by`: the user id (the email where an export writes
    user objects). An annotator's repeated annotations of one image count once: the latest by `updated_at` (else
    `created_at`; one without either is the oldest), ties to the later in the export; `annotations` counts them all,
    so the validation results can say how many were set aside."""
    if not isinstance(export, list):
        raise ExportError(f"{source}: expected a JSON list of tasks (Label Studio JSON export), "
                          f"got {type(export).__name__}")
    rows = []
    for n, task in enumerate(export):
        try:
            rows += _task_ratings(task)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            what = f"lacks {err}" if isinstance(err, KeyError) else str(err)
            raise ExportError(f"{source}: task {n} {what}: not a task built by cfgen's validation export") from None
    key = ["caption_id", "side", "annotator"]
    submitted = pl.DataFrame(rows, schema=SUBMITTED).with_row_index("order")
    latest = submitted.sort("updated_at", "order", nulls_last=False).group_by(key, maintain_order=True) \
        .agg(pl.col("choice").last(), annotations=pl.len().cast(pl.Int64))
    return latest.select(list(RATINGS)).sort(key)


def read_export(path: Path) -> pl.DataFrame:
    """`ratings` of a Label Studio JSON export file; a file that is not one is a one-line `ExportError`."""
    try:
        export = json.loads(Path(path).read_bytes())
    except (OSError, ValueError, RecursionError) as err:  # RecursionError: nesting deeper than Python parses
        raise ExportError(f"{path}: not a readable JSON file ({type(err).__name__}): export the project as JSON") \
            from None
    return ratings(export, source=str(path))
