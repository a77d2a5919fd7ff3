"""Run report: the caption-level funnel, `reports/metrics.json`, PNG figures and small CSVs for `dvc plots`.

Inputs are the stage outputs as frames: captions (ingest), sites, candidates, similar (similarity), counterfactuals
(perplexity), samples (generate's score table, one row per sample) and selected (selection, one row per accepted
pair). Every number written is a plain JSON type: floats rounded to 6 digits, None where a mean or rate is undefined
(nothing to average, zero denominator).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import polars as pl

from tasks.core.io import DIGITS, plain
from tasks.core.schemas import SCORE_COLUMNS
from tasks.core.writing import write_json
from tasks.release import figures as fig
from tasks.stages import Params

log = logging.getLogger(__name__)
FUNNEL_STEPS = ("captions_in", "with_site", "with_candidate", "with_counterfactual", "with_accepted_pair", "final")
TYPE_STEPS = ("sites", "candidates", "similar", "counterfactuals", "selected")  # rows of each edit type


def funnel(captions: pl.DataFrame, sites: pl.DataFrame, candidates: pl.DataFrame, counterfactuals: pl.DataFrame,
           selected: pl.DataFrame, exported_ids: list[str] | None = None) -> dict[str, int]:
    """Caption counts per step, in FUNNEL_STEPS order; raises ValueError unless each is <= the previous."""
    counts = dict(zip(FUNNEL_STEPS, (
        captions.height, sites["caption_id"].n_unique(), candidates["caption_id"].n_unique(), counterfactuals.height,
        selected.height, selected.height if exported_ids is None else len(exported_ids))))
    for (before, n_before), (step, n) in zip(list(counts.items()), list(counts.items())[1:]):
        if n > n_before:
            raise ValueError(f"funnel grows from {before}={n_before} to {step}={n}: inputs are from different runs")
    return counts


def type_funnel(frames: Mapping[str, pl.DataFrame], edit_types: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Per edit type, its rows at each of TYPE_STEPS (sites, candidates and similarity survivors compete within a
    caption; counterfactuals and selected pairs are one per caption)."""
    counts = {step: dict(frames[step].group_by("edit_type").len().iter_rows()) for step in TYPE_STEPS}
    return {edit_type: {step: counts[step].get(edit_type, 0) for step in TYPE_STEPS} for edit_type in edit_types}


def finite(series: pl.Series) -> np.ndarray:
    """The series' values as float64 without nulls, NaN and infinities."""
    values = series.drop_nulls().cast(pl.Float64).to_numpy()
    return values[np.isfinite(values)]


def valid_samples(samples: pl.DataFrame) -> pl.DataFrame:
    """Samples not rejected at generation (NaN/black images); their scores may still hold NaN."""
    return samples.filter(pl.col("reject_reason").is_null())


def _mean(series: pl.Series) -> float | None:
    values = finite(series)
    return round(float(values.mean()), DIGITS) if values.size else None


def _rate(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, DIGITS) if denominator else None


def run_metrics(funnel: Mapping[str, int], stage_metrics: Mapping[str, Mapping], counterfactuals: pl.DataFrame,
                samples: pl.DataFrame, selected: pl.DataFrame,
                by_edit_type: Mapping[str, Mapping] | None = None) -> dict:
    """The content of reports/metrics.json.

    `rates[step]` is step / previous step; `pair_acceptance` is accepted pairs / pairs with samples (as the selection
    stage counts it). Score means skip null and NaN; `samples` means are over valid samples only.
    """
    steps = list(funnel.items())
    valid = valid_samples(samples)
    pairs = samples["caption_id"].n_unique()
    evals = int(samples["unet_evals"].sum())
    rates = {step: _rate(n, n_before) for (_, n_before), (step, n) in zip(steps, steps[1:])}
    return plain({
        "funnel": funnel,
        "funnel_by_edit_type": by_edit_type or {},
        "rates": {**rates, "overall": _rate(steps[-1][1], steps[0][1]) if steps else None,
                  "pair_acceptance": _rate(selected.height, pairs)},
        "means": {
            "similarity": _mean(counterfactuals["similarity"]),
            "perplexity": _mean(counterfactuals["perplexity"]),
            "samples": {name: _mean(valid[name]) for name in SCORE_COLUMNS},
            "selected": {name: _mean(selected[name]) for name in SCORE_COLUMNS},
        },
        "samples": samples.height,
        "valid_samples": valid.height,
        "pairs_generated": pairs,
        "samples_per_pair": _rate(samples.height, pairs),
        "unet_evals": evals,
        "unet_evals_per_accepted_pair": _rate(evals, selected.height),
        "stages": stage_metrics,
    })


def histogram(values: np.ndarray, lo: float, hi: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """(left edges, counts) over `bins` equal bins on [lo, hi]; values outside go to the end bins.

    A value on an edge (up to 1e-9 of a bin width) counts in the bin that edge starts, as the CSV shows it.
    """
    index = np.floor(np.round((values - lo) * bins / (hi - lo), 9)).astype(np.int64)
    counts = np.bincount(np.clip(index, 0, bins - 1), minlength=bins)
    return np.round(lo + np.arange(bins) * (hi - lo) / bins, DIGITS), counts


def write_plot_data(counterfactuals: pl.DataFrame, selected: pl.DataFrame, out_dir: Path, *,
                    funnel: Mapping[str, int]) -> list[Path]:
    """CSVs for `dvc plots`, on fixed bins so any two versions line up row for row.

    funnel.csv (step,count); similarity_hist.csv (bin,count on [0, 1]); perplexity_hist.csv (log10_perplexity,count
    on [0, 5]); clip_scores_hist.csv (bin on [-1, 1], then one count column per score of the selected pairs).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    frames = {"funnel.csv": pl.DataFrame({"step": list(funnel), "count": list(funnel.values())},
                                         schema={"step": pl.String, "count": pl.Int64})}
    edges, counts = histogram(finite(counterfactuals["similarity"]), 0.0, 1.0, 100)
    frames["similarity_hist.csv"] = pl.DataFrame({"bin": edges, "count": counts})
    perplexity = finite(counterfactuals["perplexity"])
    edges, counts = histogram(np.log10(perplexity[perplexity > 0]), 0.0, 5.0, 50)
    frames["perplexity_hist.csv"] = pl.DataFrame({"log10_perplexity": edges, "count": counts})
    frames["clip_scores_hist.csv"] = pl.DataFrame({
        "bin": histogram(np.empty(0), -1.0, 1.0, 40)[0],
        **{name: histogram(finite(selected[name]), -1.0, 1.0, 40)[1] for name in SCORE_COLUMNS}})
    paths = []
    for name, frame in frames.items():
        frame.write_csv(out_dir / name)
        paths.append(out_dir / name)
    log.info("wrote %d plot CSVs to %s", len(paths), out_dir)
    return paths


def figures(counterfactuals: pl.DataFrame, samples: pl.DataFrame, selected: pl.DataFrame, funnel: Mapping[str, int],
            images_dir: Path, out_dir: Path, max_examples: int = 8, thresholds: Mapping[str, float] | None = None,
            window: tuple[float, float] | None = None) -> list[Path]:
    """funnel.png, similarity.png, perplexity.png, clip_scores.png, examples.png in `out_dir`; byte-identical on rerun.

    `thresholds` (score -> inclusive minimum, `SelectionParams.thresholds`) and `window` (similarity (lower, upper])
    add reference lines. Image paths of `selected` are relative to `images_dir`. Empty inputs give "no data" figures.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    valid = valid_samples(samples)
    drawn = {
        "funnel.png": fig.funnel_chart(funnel),
        "similarity.png": fig.histogram_chart(finite(counterfactuals["similarity"]), "cos(E(C_o), E(C_c))",
                                              "Similarity of the counterfactual captions", window or ()),
        "perplexity.png": fig.histogram_chart(finite(counterfactuals["perplexity"]), "perplexity of C_c (log scale)",
                                              "Perplexity of the counterfactual captions", log_x=True),
        "clip_scores.png": fig.clip_scores_chart({name: (finite(valid[name]), finite(selected[name]))
                                                  for name in SCORE_COLUMNS}, thresholds or {}),
        "examples.png": fig.contact_sheet(fig.example_rows(selected, counterfactuals, max_examples), Path(images_dir)),
    }
    paths = []
    for name, figure in drawn.items():
        fig.save(figure, out_dir / name)
        paths.append(out_dir / name)
    log.info("wrote %d figures to %s", len(paths), out_dir)
    return paths


TRUTH_KEYS = ("pair_accuracy", "minimality", "p2p_gain", "filter_lift", "image_accuracy", "selection_keys")


def write_report(frames: Mapping[str, pl.DataFrame], stage_metrics: Mapping[str, Mapping], params: Params,
                 truth: Mapping | None = None) -> dict:
    """`paths.run_metrics`, the figures and the plot data of one run; returns the metrics. `frames` holds the stage
    outputs by name: captions, sites, candidates, similar, counterfactuals, samples, selected; `truth` the truth
    stage's metrics (its headline keys join the report when it ran)."""
    paths = params.paths
    counterfactuals, samples, selected = frames["counterfactuals"], frames["samples"], frames["selected"]
    counts = funnel(frames["captions"], frames["sites"], frames["candidates"], counterfactuals, selected)
    metrics = run_metrics(counts, stage_metrics, counterfactuals, samples, selected,
                          type_funnel(frames, params.sites.types))
    if truth and truth.get("enabled"):
        metrics["truth"] = {key: truth[key] for key in TRUTH_KEYS}
    # the figures first: a stored image name that is no name inside the folder is refused before anything is written
    figures(counterfactuals, samples, selected, counts, paths.selected_images, paths.figures,
            thresholds=params.selection.thresholds(), window=(params.similarity.lower, params.similarity.upper))
    write_json(metrics, paths.run_metrics)
    write_plot_data(counterfactuals, selected, paths.plots, funnel=counts)
    return metrics
