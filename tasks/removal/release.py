"""The removal pairs as dataset rows and the dataset card of their export.

A row is (I_0, C_0) the real image and caption, (I_1, C_1) the edited ones, in the same leading columns as the
noun-swap export, then provenance; `id` = `<caption_id>/<removed classes joined by +>` is unique per pair. Rows are
sorted by id and grouped by split (train / validation / test: every pair of an image in one split).
"""

from __future__ import annotations

import polars as pl
import yaml

from tasks.core.schemas import REMOVAL_EXPORT, REMOVAL_SPLITS


def dataset_rows(pairs: pl.DataFrame) -> pl.DataFrame:
    rows = pairs.rename({"caption": "caption_0", "edited_caption": "caption_1"}).with_columns(
        id=pl.concat_str(pl.col("caption_id"), pl.lit("/"), pl.col("removed").list.join("+")))
    return rows.select([pl.col(c).cast(t) for c, t in REMOVAL_EXPORT.items()]).sort("id")


FUNNEL = (("images", "removal_masks", "images"), ("eligible (≥ 2 classes)", "removal_masks", "eligible"),
          ("classes tried", "removal_masks", "classes_tried"), ("removals", "removal_masks", "removals"),
          ("edited captions", "removal_captions", "rows_out"), ("filled images", "inpaint", "rows_out"),
          ("pairs", "removal_selection", "rows_out"))


def funnel(metrics: dict[str, dict]) -> list[tuple[str, int]]:
    """(step, count) from the stages' metrics: images -> eligible -> classes tried -> removals -> pairs."""
    return [(label, metrics[stage][key]) for label, stage, key in FUNNEL]


def card(metrics: dict[str, dict], splits: dict[str, int], settings: dict) -> str:
    """README.md of the export folder: `datasets` configs for the splits, the funnel, the rejects, the settings."""
    front = {"configs": [{"config_name": "default", "data_files": [
        {"split": s, "path": f"data/{s}-*.parquet"} for s in REMOVAL_SPLITS if splits.get(s)]}]}
    lines = ["---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
             "# Object-removal counterfactuals", "",
             "Each row pairs a real image and caption (`image_0`, `caption_0`) with the image with one co-occurring "
             "object class removed and the caption without the noun phrases naming it (`image_1`, `caption_1`) — "
             "the method of Kim et al., *Exposing and Mitigating Spurious Correlations for Cross-Modal Retrieval*.",
             "", "## Funnel", "", "| step | count |", "|---|---|",
             *[f"| {label} | {count} |" for label, count in funnel(metrics)], "",
             "## Rejects", "", "| stage | reason | rows |", "|---|---|---|",
             *[f"| {stage} | {reason} | {n} |" for stage, m in metrics.items() for reason, n in m["rejects"].items()],
             "", "## Splits", "", "| split | pairs |", "|---|---|",
             *[f"| {s} | {splits.get(s, 0)} |" for s in REMOVAL_SPLITS], "", "## Settings", "", "```yaml",
             yaml.safe_dump(settings, sort_keys=True).rstrip(), "```", ""]
    return "\n".join(lines)
