"""The evaluate stage: every model of `evaluate.models` on the selected pairs (paper §4.2, Table 2, Fig. 3).

Retrieval sets: `all` (both images and both captions of every pair), `validated` (the human-validated pairs, when a
validation result is given) and `real` (each pair's C_o with its real image, when `paths.source_images` holds it),
with `relative` = (all − real) / real for every R@k, as in Table 2. ITM score differences use the real image as the
reference image where there is one, else the generated I_o. A model that is the CLIP selection filtered with is
flagged `used_to_filter` (its scores are biased in the dataset's favour; the paper left CLIP out for that reason).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import polars as pl

from tasks.core.errors import UserError
from tasks.core.io import read_rgb
from tasks.core.params import EvaluateParams
from tasks.core.schemas import EVALUATION
from tasks.core.specs import ClipSpec, ItmSpec
from tasks.evaluation import itm, odmap
from tasks.evaluation.retrieval import RetrievalSet, retrieval
from tasks.evaluation.scorers import Scorer, load_scorer

log = logging.getLogger(__name__)


def read_image(path: Path) -> np.ndarray:
    if not path.is_file():
        raise UserError(f"image {path} does not exist: rerun `cfgen selection` (or fix paths.source_images)")
    return read_rgb(path)


def recall(scorer: Scorer, pairs: list[tuple[str, str]], images: dict[str, np.ndarray], ks) -> dict[str, float]:
    """R@k of `scorer` over ground-truth (caption, image key) pairs; `images` maps a key to its pixels."""
    rs = RetrievalSet.of(pairs)
    return retrieval(scorer.matrix(rs.captions, [images[k] for k in rs.images]), rs, ks)


def evaluate_model(scorer: Scorer, selected: pl.DataFrame, images: dict[str, np.ndarray], real: list[str | None],
                   validated: list[str] | None, params: EvaluateParams) -> tuple[dict, pl.DataFrame]:
    """(metrics, per-pair Δ) of one model; image keys are store paths (generated) or real file paths."""
    rows = selected.select("caption_id", "caption", "counterfactual", "image_o", "image_c").rows()

    def both(chosen: list[tuple]) -> list[tuple[str, str]]:
        return [p for _, c_o, c_c, i_o, i_c in chosen for p in ((c_o, i_o), (c_c, i_c))]

    metrics = {"all": recall(scorer, both(rows), images, params.ks) if rows else None}
    if validated is not None:
        chosen = [row for row in rows if row[0] in set(validated)]
        metrics["validated"] = recall(scorer, both(chosen), images, params.ks) if chosen else None
    real_pairs = [(c_o, key) for (_, c_o, *_), key in zip(rows, real) if key is not None]
    if real_pairs:
        metrics["real"] = recall(scorer, real_pairs, images, params.ks)
        metrics["relative"] = {k: (v - real_v) / real_v if real_v else None
                               for (k, v), real_v in zip(metrics["all"].items(), metrics["real"].values())}
    reference = [key or i_o for (*_, i_o, _), key in zip(rows, real)]
    deltas = itm.deltas([r[1] for r in rows], [r[2] for r in rows], [images[k] for k in reference], reference,
                        [images[r[3]] for r in rows], [images[r[4]] for r in rows], scorer, params.seed)
    metrics["itm"] = itm.summary(deltas)
    return metrics, deltas.with_columns(caption_id=selected["caption_id"]).select("caption_id", *itm.DELTAS)


def load_images(selected: pl.DataFrame, images_dir: Path,
                real_paths: list[Path | None]) -> tuple[dict[str, np.ndarray], list[str | None]]:
    """(pixels by image key, each pair's real image key or None): generated images are keyed by their store path
    (relative to `images_dir`), real ones (`real_paths`, one per pair) by their file path."""
    real = [str(p) if p else None for p in real_paths]
    keys = {*selected["image_o"], *selected["image_c"]}
    return {k: read_image(images_dir / k) for k in sorted(keys)} | {k: read_image(Path(k)) for k in real if k}, real


def evaluate(name: str, spec: ClipSpec | ItmSpec, selected: pl.DataFrame, images: dict[str, np.ndarray],
             real: list[str | None], validated: list[str] | None, params: EvaluateParams,
             filter_clip: ClipSpec | None) -> tuple[dict, pl.DataFrame]:
    """(metrics, Δ rows) of model `name`."""
    metrics, deltas = evaluate_model(load_scorer(spec, params.batch_size), selected, images, real, validated, params)
    metrics["used_to_filter"] = spec == filter_clip
    if spec == filter_clip:
        log.warning("evaluate: %s is the CLIP selection filtered with; its scores favour the dataset", name)
    return metrics, deltas.with_columns(model=pl.lit(name)).select(list(EVALUATION))


def removal_queries(pairs: pl.DataFrame) -> pl.DataFrame:
    """ODmAP's queries: the test split's edited images, each once (the first pair showing it)."""
    return pairs.filter(pl.col("split") == "test").unique("image_1", keep="first", maintain_order=True) \
        .select("image_1", "removed", "remaining")


def od_map(spec: ClipSpec | ItmSpec, queries: pl.DataFrame, gallery: pl.DataFrame, images: dict[str, np.ndarray],
           params: EvaluateParams) -> dict[str, float]:
    """ODmAP@k of a model: `queries` (image_1, removed, remaining) retrieve from `gallery` (caption, classes)."""
    scorer = load_scorer(spec, params.batch_size)
    scores = scorer.matrix(gallery["caption"].to_list(), [images[k] for k in queries["image_1"]]).T
    relevant = odmap.relevance([set(r) for r in queries["removed"]], [set(r) for r in queries["remaining"]],
                               [set(c) for c in gallery["classes"]], params.odmap_variant)
    return odmap.od_map(scores, relevant, params.ks)


def summary(selected: pl.DataFrame, real: list[str | None], validated: list[str] | None) -> dict:
    return {"pairs": selected.height, "real_images": sum(k is not None for k in real),
            "validated_pairs": None if validated is None else len(set(validated) & set(selected["caption_id"]))}


def run(selected: pl.DataFrame, params: EvaluateParams, images_dir: Path, real_paths: list[Path | None] | None = None,
        validated: list[str] | None = None, filter_clip: ClipSpec | None = None) -> tuple[dict, pl.DataFrame]:
    """(metrics per model name + counts, Δ rows of every model) for a `selected` frame whose image paths are
    relative to `images_dir`; `real_paths` gives each pair's real image (`io.source_image_paths`)."""
    images, real = load_images(selected, images_dir, real_paths or [None] * selected.height)
    results = {name: evaluate(name, spec, selected, images, real, validated, params, filter_clip)
               for name, spec in params.models.items()}
    deltas = pl.concat([d for _, d in results.values()]) if results else pl.DataFrame(schema=EVALUATION)
    return {"models": {name: m for name, (m, _) in results.items()}, **summary(selected, real, validated)}, deltas
