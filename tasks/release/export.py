"""Release: the selected pairs as a `datasets` folder in the Hub layout, optionally pushed to the Hub.

`dataset_rows` gives one row per selected pair, sorted by `id`, in the published COCO-Counterfactuals schema
(`id, image_0, image_1, caption_0, caption_1`: I_o, I_c, C_o, C_c) followed by provenance columns and the VLM
judge's four P(Yes) and verdict (null where the judge did not run). `write_dataset`
writes them as `data/train-{i:05d}-of-{n:05d}.parquet` shards with both PNGs embedded byte for byte as
`datasets.Image` (struct {bytes, path}, path relative to the image folder); same inputs give byte-identical shards.
A push needs `repo_id` and an `HF_TOKEN`; the token is only ever handed to `huggingface_hub`.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path

import datasets
import httpx2
import huggingface_hub
import polars as pl
from huggingface_hub.errors import HfHubHTTPError
from polars.datatypes import DataTypeClass

from tasks.core.errors import UserError
from tasks.core.images import stored_files
from tasks.core.publication import replaced_folder
from tasks.core.schemas import EXPORT, JUDGE_COLUMNS
from tasks.release.params import ExportParams

log = logging.getLogger(__name__)

IMAGE_COLUMNS = ("image_0", "image_1")
SCHEMA = EXPORT
SHARDS = re.compile(r"[a-z]+-\d{5}-of-\d{5}\.parquet")  # what `write_dataset` writes into a config's folder
_VALUE_TYPES: dict[DataTypeClass | pl.DataType, str] = {pl.String: "string", pl.Int64: "int64", pl.Float64: "float64",
                                                        pl.Boolean: "bool"}


def dataset_rows(selected: pl.DataFrame, counterfactuals: pl.DataFrame, models: dict[str, str],
                 judged: pl.DataFrame | None = None) -> pl.DataFrame:
    """SCHEMA + one string column per `models` entry (`model_<role>` -> id@revision, `library_<name>` -> version),
    one row per selected pair; the judge's columns from `judged` (`JUDGED`, null for a pair it lacks).

    Every selected pair must have both image paths and exactly one counterfactual_captions row.
    """
    if bad := [name for name in models if not name.startswith(("model_", "library_"))]:
        raise ValueError(f"provenance columns must be named model_<role> or library_<name>, got {bad}")
    if selected["image_o"].null_count() or selected["image_c"].null_count():
        raise ValueError("selected pairs without stored PNGs: regenerate them (cfgen selection) before exporting")
    caption_scores = counterfactuals.select("caption_id", "position", "mlm_score", "similarity", "perplexity")
    joined = selected.join(caption_scores, on="caption_id", how="left", validate="1:1")
    if judged is not None:
        joined = joined.join(judged.select("caption_id", *JUDGE_COLUMNS, "judge_pass"), on="caption_id", how="left",
                             validate="1:1")
    if joined["position"].null_count():
        missing = joined.filter(pl.col("position").is_null())["caption_id"].to_list()
        raise ValueError(f"selected pairs missing from counterfactual_captions: {missing[:5]}")
    renamed = joined.rename({"caption_id": "id", "image_o": "image_0", "image_c": "image_1",
                             "caption": "caption_0", "counterfactual": "caption_1"})
    return renamed.select(
        *[pl.col(name).cast(dtype) if name in renamed.columns else pl.lit(None, dtype).alias(name)
          for name, dtype in SCHEMA.items()],
        *[pl.lit(spec, dtype=pl.String).alias(name) for name, spec in models.items()],
    ).sort("id")


def features(rows: pl.DataFrame) -> datasets.Features:
    """HF features of a `dataset_rows` frame: the image columns as `datasets.Image`, the rest as plain values."""
    def feature(name: str, dtype: pl.DataType):
        if name in IMAGE_COLUMNS:
            return datasets.Image()
        if isinstance(dtype, pl.List):
            return datasets.Sequence(datasets.Value(_VALUE_TYPES[dtype.inner]))
        return datasets.Value(_VALUE_TYPES[dtype])

    return datasets.Features({name: feature(name, dtype) for name, dtype in rows.schema.items()})


def embedded(rows: pl.DataFrame, images_dir: Path) -> datasets.Dataset:
    """`rows` as a Dataset whose image columns hold each PNG's bytes (unchanged) and its relative path; every name
    is checked (`stored_files`: inside `images_dir`) before any file is read."""
    data = rows.to_dict(as_series=False)
    files = {column: stored_files(images_dir, data[column]) for column in IMAGE_COLUMNS}
    for column in IMAGE_COLUMNS:
        data[column] = [{"bytes": file.read_bytes(), "path": path} for file, path in zip(files[column], data[column])]
    return datasets.Dataset.from_dict(data, features=features(rows))


def write_dataset(splits: Mapping[str, pl.DataFrame], images_dir: Path, out_dir: Path, params: ExportParams,
                  folder: str = "data") -> list[Path]:
    """Make `out_dir/<folder>` hold exactly the `<split>-{i:05d}-of-{n:05d}.parquet` shards of each split (at most
    shard_rows rows each, at least one shard); returns them. The folder is replaced as a whole (`replaced_folder`): a
    run killed while writing leaves the last complete set of shards. A stored name that is no name inside
    `images_dir` (`stored_files`) is refused before any shard is written."""
    data_dir, shards = Path(out_dir) / folder, []
    stored_files(images_dir, (name for rows in splits.values() for column in IMAGE_COLUMNS for name in rows[column]))
    with replaced_folder(data_dir, SHARDS) as staged:
        for split, rows in splits.items():
            n = max(1, math.ceil(rows.height / params.shard_rows))
            for i in range(n):
                name = f"{split}-{i:05d}-of-{n:05d}.parquet"
                shard = embedded(rows.slice(i * params.shard_rows, params.shard_rows), Path(images_dir))
                shard.to_parquet(staged / name)
                shards.append(data_dir / name)
    log.info("wrote %d rows in %d shard(s) to %s", sum(r.height for r in splits.values()), len(shards), data_dir)
    return shards


def push(out_dir: Path, repo_id: str, token: str, private: bool) -> str:
    """Create the dataset repo if needed and upload `out_dir` (remote shards not in it are deleted); its URL."""
    api = huggingface_hub.HfApi(token=token)
    url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    api.upload_folder(folder_path=str(out_dir), repo_id=repo_id, repo_type="dataset",
                      delete_patterns="data/train-*.parquet", commit_message="Export COCO-Counterfactuals pairs")
    return str(url)


def push_if_configured(out_dir: Path, params: ExportParams, environ: Mapping[str, str] = os.environ) -> str | None:
    """Push when `params.repo_id` is set (`HF_TOKEN` must be in `environ`, else a one-line UserError); without a
    repo_id, log why not and return None."""
    if params.repo_id is None:
        log.info("export.repo_id not set: dataset left at %s, not pushed", out_dir)
        return None
    token = environ.get("HF_TOKEN")
    if not token:
        raise UserError(f"export.repo_id is {params.repo_id} but HF_TOKEN is not set: set it to push, or unset "
                        "export.repo_id")
    try:
        url = push(Path(out_dir), params.repo_id, token, params.private)
    except (OSError, httpx2.HTTPError, HfHubHTTPError) as error:  # offline, unreachable, refused: nothing was pushed
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise UserError(f"could not push {out_dir} to the Hub as {params.repo_id}: {reason}") from None
    log.info("pushed %s to %s", out_dir, url)
    return url
