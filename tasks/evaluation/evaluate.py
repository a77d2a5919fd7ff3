"""The evaluate stage: every model of `evaluate.models` on the selected pairs (paper §4.2, Table 2, Fig. 3).

Retrieval sets: `all` (both images and both captions of every pair), `validated` (the human-validated pairs, when a
validation result is given) and `real` (each pair's C_o with its real image, when `paths.source_images` holds it),
with `relative` = (all − real) / real for every R@k, as in Table 2. ITM score differences use the real image as the
reference image where there is one, else the generated I_o. A model that is the CLIP selection filtered with is
flagged `used_to_filter` (its scores are biased in the dataset's favour; the paper left CLIP out for that reason).

Images are keys read a batch at a time (`Images`), never all at once, and each once per model: a bi-encoder embeds
each caption and image once and every set and Δ reuses the embeddings. A cross-encoder ranks a bi-encoder's top
`rerank_k` candidates per query (`first_stage`), so it scores ~4N·k pairs, not 4N²; its Δ pairs are scored exactly.
Every pair it scores for the sets and the Δ is known before its first forward pass (`Asked`: a dry run) and scored in
one image-ordered call (`Scored`), so it too reads each image once (its first stage's embedding reads them once more:
that is the bi-encoder's read).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import cast, overload

import numpy as np
import polars as pl

from tasks.core.errors import UserError
from tasks.core.images import read_rgb, stored_files
from tasks.core.schemas import EVALUATION
from tasks.core.specs import ClipSpec, ItmSpec
from tasks.evaluation import itm, odmap
from tasks.evaluation.params import EvaluateParams
from tasks.evaluation.retrieval import RetrievalSet, ranking, rerank, retrieval
from tasks.evaluation.scorers import (
    Asked,
    BiEncoder,
    CrossEncoder,
    Embedded,
    Images,
    PairScorer,
    Reader,
    Scorer,
    load_scorer,
)

log = logging.getLogger(__name__)


def require_files(paths: Iterable[Path]) -> None:
    """Every image file exists (checked before any model runs; no pixels read), else one line."""
    for path in paths:
        if not path.is_file():
            raise UserError(f"image {path} does not exist: rerun `cfgen selection` (or fix paths.source_images)")


def reader(images_dir: Path) -> Reader:
    """An image key's pixels: a generated image's key is its store path under `images_dir`, a real one's its absolute
    path (which `images_dir / key` keeps)."""
    return lambda key: read_rgb(images_dir / key)


def locate(selected: pl.DataFrame, images_dir: Path, real_paths: list[Path | None]) -> list[str | None]:
    """Each pair's real image key (`real_paths`, one per pair, made absolute) or None, once every image of
    `selected` (stored names inside `images_dir`: `stored_files`) and every real image is known to exist."""
    real = [str(p.absolute()) if p else None for p in real_paths]
    require_files(stored_files(images_dir, sorted({*selected["image_o"], *selected["image_c"]}))
                  + [Path(k) for k in real if k])
    return real


First = list[tuple[np.ndarray, bool]]  # per direction: (queries × K candidates in first-stage order, by_caption)


def first_stage(model: PairScorer, first: Embedded | None, captions: Sequence[str], image_keys: Sequence[str], k: int,
                rerank_k: int | None, by_caption: Sequence[bool]) -> First:
    """Per direction of `by_caption` (captions query images, or images query captions), every query's candidates in
    first-stage order: a bi-encoder's own top k; a cross-encoder's the top max(k, rerank_k) of `first` (None: every
    candidate in index order)."""
    ranker, depth = (model, k) if isinstance(model, Embedded) else (first, max(k, rerank_k or 0))

    def size(d: bool) -> tuple[int, int]:  # (queries, candidates)
        return (len(captions), len(image_keys)) if d else (len(image_keys), len(captions))

    return [(ranking(ranker.rows(captions, image_keys, d), *size(d), depth) if ranker else
             np.broadcast_to(np.arange(size(d)[1]), size(d)), d) for d in by_caption]


def ranked(model: PairScorer, firsts: First, captions: Sequence[str], images: Images, k: int,
           rerank_k: int | None) -> list[np.ndarray]:
    """Per direction of `firsts`, every query's top-k candidate indices (queries × min(k, candidates)): a
    bi-encoder's first stage as it is; a cross-encoder's first `rerank_k` candidates (None: every one) ordered by its
    scores, the rest after them in first-stage order."""
    if isinstance(model, Embedded):
        return [candidates[:, :k] for candidates, _ in firsts]

    def scores(caption_at: np.ndarray, image_at: np.ndarray) -> np.ndarray:
        return model.pairs([captions[c] for c in caption_at], images.take(image_at))

    every = max(len(captions), len(images))
    return [r[:, :k] for r in rerank(scores, firsts, len(images), rerank_k or every)]


def recall(model: PairScorer, firsts: First, rs: RetrievalSet, read: Reader,
           params: EvaluateParams) -> dict[str, float]:
    """R@k of a model over a retrieval set from its `first_stage` in both directions (images query, then captions)."""
    by_image, by_caption = ranked(model, firsts, rs.captions, Images(tuple(rs.images), read), max(params.ks),
                                  params.rerank_k)
    return retrieval(by_image, by_caption, rs, params.ks)


@overload
def prepared(scorer: BiEncoder, captions: Sequence[str], images: Images) -> Embedded: ...
@overload
def prepared(scorer: CrossEncoder, captions: Sequence[str], images: Images) -> CrossEncoder: ...
@overload
def prepared(scorer: None, captions: Sequence[str], images: Images) -> None: ...
def prepared(scorer: Scorer | None, captions: Sequence[str], images: Images) -> Embedded | CrossEncoder | None:
    """A bi-encoder with every caption and image embedded once; a cross-encoder as it is."""
    return scorer.embed(captions, images) if isinstance(scorer, BiEncoder) else scorer


def retrieval_pairs(rows: list[tuple], real: list[str | None],
                    validated: list[str] | None) -> dict[str, list[tuple[str, str]]]:
    """Each retrieval set's ground-truth (caption, image key) pairs: `all`, `validated` (when a validation result is
    given) and `real` (when some pair has a real image)."""
    def both(chosen: list[tuple]) -> list[tuple[str, str]]:
        return [p for _, c_o, c_c, i_o, i_c in chosen for p in ((c_o, i_o), (c_c, i_c))]

    sets = {"all": both(rows)}
    if validated is not None:
        sets["validated"] = both([row for row in rows if row[0] in set(validated)])
    if real_pairs := [(c_o, key) for (_, c_o, *_), key in zip(rows, real) if key is not None]:
        sets["real"] = real_pairs
    return sets


def evaluate_model(scorer: Scorer, first: BiEncoder | None, selected: pl.DataFrame, read: Reader,
                   real: list[str | None], validated: list[str] | None,
                   params: EvaluateParams) -> tuple[dict, pl.DataFrame]:
    """(metrics, per-pair Δ) of one model (`first`: the bi-encoder a cross-encoder re-ranks); image keys are store
    paths (generated) or real file paths, read by `read` a batch at a time, each once per model."""
    rows = selected.select("caption_id", "caption", "counterfactual", "image_o", "image_c").rows()
    captions = [c for _, c_o, c_c, *_ in rows for c in (c_o, c_c)]
    images = Images(tuple(k for *_, i_o, i_c in rows for k in (i_o, i_c)) + tuple(k for k in real if k), read)
    model: PairScorer
    model, embedded = prepared(scorer, captions, images), prepared(first, captions, images)
    sets = {name: RetrievalSet.of(pairs) if pairs else None
            for name, pairs in retrieval_pairs(rows, real, validated).items()}
    firsts = {name: first_stage(model, embedded, rs.captions, rs.images, max(params.ks), params.rerank_k, (False, True))
              for name, rs in sets.items() if rs}
    reference = Images(tuple(key or i_o for (*_, i_o, _), key in zip(rows, real)), read)

    def measured(model: PairScorer) -> tuple[dict, pl.DataFrame]:
        return ({name: recall(model, firsts[name], rs, read, params) if rs else None for name, rs in sets.items()},
                itm.deltas([r[1] for r in rows], [r[2] for r in rows], reference,
                           Images(tuple(r[3] for r in rows), read), Images(tuple(r[4] for r in rows), read), model,
                           params.seed))

    if isinstance(model, CrossEncoder):  # a dry run finds every pair it will score: one call reads each image once
        asked = Asked()
        measured(asked)
        model = asked.scored(model, read)
    metrics, deltas = measured(model)
    if "real" in metrics:
        metrics["relative"] = {k: (v - real_v) / real_v if real_v else None
                               for (k, v), real_v in zip(metrics["all"].items(), metrics["real"].values())}
    metrics["itm"] = itm.summary(deltas)
    return metrics, deltas.with_columns(caption_id=selected["caption_id"]).select("caption_id", *itm.DELTAS)


def evaluate(name: str, spec: ClipSpec | ItmSpec, selected: pl.DataFrame, read: Reader, real: list[str | None],
             validated: list[str] | None, params: EvaluateParams,
             filter_clip: ClipSpec | None) -> tuple[dict, pl.DataFrame]:
    """(metrics, Δ rows) of model `name`."""
    first = params.first_stage(spec)
    metrics, deltas = evaluate_model(load_scorer(spec, params.batch_size),
                                     cast(BiEncoder, load_scorer(first, params.batch_size)) if first else None,
                                     selected, read, real, validated, params)  # a first stage is a bi-encoder
    metrics["used_to_filter"] = spec == filter_clip
    if spec == filter_clip:
        log.warning("evaluate: %s is the CLIP selection filtered with; its scores favour the dataset", name)
    return metrics, deltas.with_columns(model=pl.lit(name)).select(list(EVALUATION))


def removal_queries(pairs: pl.DataFrame) -> pl.DataFrame:
    """ODmAP's queries: the test split's edited images, each once (the first pair showing it)."""
    return pairs.filter(pl.col("split") == "test").unique("image_1", keep="first", maintain_order=True) \
        .select("image_1", "removed", "remaining")


def od_map(spec: ClipSpec | ItmSpec, queries: pl.DataFrame, gallery: pl.DataFrame, read: Reader,
           params: EvaluateParams) -> dict[str, dict]:
    """ODmAP@k of a model, `queries` (image_1, removed, remaining) retrieving from `gallery` (caption, classes):
    `odmap` under `odmap_normalisation` (the headline) and `odmap_by_normalisation` (every normalisation)."""
    first = params.first_stage(spec)
    captions, images = gallery["caption"].to_list(), Images(tuple(queries["image_1"]), read)
    model = prepared(load_scorer(spec, params.batch_size), captions, images)
    embedded = prepared(cast(BiEncoder, load_scorer(first, params.batch_size)) if first else None, captions, images)
    k = max(params.ks)
    firsts = first_stage(model, embedded, captions, images.keys, k, params.rerank_k, (False,))
    (columns,) = ranked(model, firsts, captions, images, k, params.rerank_k)
    relevant = odmap.relevance([set(r) for r in queries["removed"]], [set(r) for r in queries["remaining"]],
                               [set(c) for c in gallery["classes"]], columns, params.odmap_variant)
    by_normalisation = {n: odmap.od_map(relevant, params.ks, n) for n in odmap.NORMALISATIONS}
    return {"odmap": by_normalisation[params.odmap_normalisation], "odmap_by_normalisation": by_normalisation}


def summary(selected: pl.DataFrame, real: list[str | None], validated: list[str] | None) -> dict:
    return {"pairs": selected.height, "real_images": sum(k is not None for k in real),
            "validated_pairs": None if validated is None else len(set(validated) & set(selected["caption_id"]))}


def run(selected: pl.DataFrame, params: EvaluateParams, images_dir: Path, real_paths: list[Path | None] | None = None,
        validated: list[str] | None = None, filter_clip: ClipSpec | None = None) -> tuple[dict, pl.DataFrame]:
    """(metrics per model name + counts, Δ rows of every model) for a `selected` frame whose image paths are
    relative to `images_dir`; `real_paths` gives each pair's real image (`images.source_image_paths`)."""
    real = locate(selected, images_dir, real_paths or [None] * selected.height)
    results = {name: evaluate(name, spec, selected, reader(images_dir), real, validated, params, filter_clip)
               for name, spec in params.models.items()}
    deltas = pl.concat([d for _, d in results.values()]) if results else pl.DataFrame(schema=EVALUATION)
    return {"models": {name: m for name, (m, _) in results.items()}, **summary(selected, real, validated)}, deltas
