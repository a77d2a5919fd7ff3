"""Report figures drawn on matplotlib's Agg canvas (no pyplot state): fixed sizes and dpi, no PNG metadata stamp.

Each `*_chart` returns a Figure; `save` writes it as PNG so that the same inputs give the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tasks.core.images import read_rgb, stored_file
from tasks.core.writing import write_file

DPI = 100
HIGHLIGHT = {"o": "#1f5fbf", "c": "#c0392b"}  # original word (in C_o), substitute (in C_c)
SHEET_WIDTH, CELL_HEIGHT, SHEET_COLUMNS = 10.0, 3.6, 2  # inches, inches, pairs per row
WRAP, MAX_LINES = 70, 3  # caption characters per line, lines per caption


def new_figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def save(figure: Figure, path: Path) -> None:
    """Write `figure` as a PNG at `path`, atomically."""
    write_file(path, lambda temporary: figure.savefig(temporary, dpi=DPI, format="png", metadata={"Software": None}))


def no_data(ax: Axes, note: str = "no data") -> None:
    ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=14, color="grey")
    ax.set_xticks([])
    ax.set_yticks([])


def funnel_chart(funnel: Mapping[str, int]) -> Figure:
    """Horizontal bars, first step on top, each labelled with its count and share of the first step."""
    figure = new_figure(7.0, 3.6)
    ax = figure.add_subplot()
    ax.set_title("Caption funnel")
    steps, counts = list(funnel), list(funnel.values())
    if not steps or counts[0] == 0:
        no_data(ax)
        return figure
    ax.barh(steps, counts, color="#4c72b0")
    ax.invert_yaxis()
    for y, n in enumerate(counts):
        ax.text(n, y, f" {n} ({n / counts[0]:.0%})", va="center", fontsize=9)
    ax.set_xlim(0, counts[0] * 1.25)
    ax.set_xlabel("captions")
    figure.tight_layout()
    return figure


def bin_edges(values: np.ndarray, n: int = 30) -> np.ndarray:
    """`n` equal bins spanning the (non-empty) values; a single value gets a small range around it."""
    lo, hi = float(values.min()), float(values.max())
    pad = 0.01 * max(abs(lo), 1.0) if lo == hi else 0.0
    return np.linspace(lo - pad, hi + pad, n + 1)


def histogram_chart(values: np.ndarray, xlabel: str, title: str, lines: Sequence[float] = (),
                    log_x: bool = False) -> Figure:
    """Histogram of finite `values` (log-spaced bins and axis when `log_x`), with dashed reference `lines`."""
    figure = new_figure(6.0, 4.0)
    ax = figure.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    values = values[values > 0] if log_x else values
    if not values.size:
        no_data(ax)
        return figure
    if log_x:
        bins = np.exp(bin_edges(np.log(values)))
        ax.set_xscale("log")
    else:
        bins = bin_edges(values)
    ax.hist(values, bins=bins, color="#4c72b0", edgecolor="white")
    for x in lines:
        ax.axvline(x, color="#c0392b", linestyle="--", linewidth=1)
    ax.set_ylabel("captions")
    ax.text(0.98, 0.95, f"n = {values.size}\nmedian = {np.median(values):.4g}", transform=ax.transAxes,
            ha="right", va="top", fontsize=9)
    figure.tight_layout()
    return figure


def deltas_chart(deltas: Mapping[str, Mapping[str, np.ndarray]]) -> Figure:
    """Paper Fig. 3: one row per model, one histogram per ITM score difference, a line at 0 and the share < 0."""
    names = list(deltas) or ["(no model)"]
    columns = max((len(d) for d in deltas.values()), default=1)
    figure = new_figure(3.0 * columns, 2.6 * len(names))
    for row, name in enumerate(names):
        for column, (delta, values) in enumerate(deltas.get(name, {}).items() or [("", np.zeros(0))]):
            ax = figure.add_subplot(len(names), columns, row * columns + column + 1)
            ax.set_title(f"{name}: {delta}", fontsize=9)
            values = values[np.isfinite(values)]
            if not values.size:
                no_data(ax)
                continue
            ax.hist(values, bins=bin_edges(values, 20),  # type: ignore[arg-type]  # matplotlib's stub: no array bins
                    color="#4c72b0", edgecolor="white")
            ax.axvline(0.0, color="#c0392b", linestyle="--", linewidth=1)
            ax.text(0.98, 0.95, f"< 0: {(values < 0).mean():.0%}", transform=ax.transAxes, ha="right", va="top",
                    fontsize=8)
    figure.tight_layout()
    return figure


def clip_scores_chart(scores: Mapping[str, tuple[np.ndarray, np.ndarray]], thresholds: Mapping[str, float]) -> Figure:
    """One panel per score: densities over all valid samples vs the selected ones, dashed line at the minimum."""
    figure = new_figure(10.0, 7.0)
    figure.suptitle("CLIP scores: all valid samples vs selected pairs")
    for ax, (name, (every, chosen)) in zip(figure.subplots(2, 2).flat, scores.items()):
        ax.set_title(name)
        if not every.size and not chosen.size:
            no_data(ax)
            continue
        bins = bin_edges(np.concatenate([every, chosen]))
        for values, label, color in ((every, "all", "#999999"), (chosen, "selected", "#4c72b0")):
            if values.size:
                ax.hist(values, bins=bins, density=True, alpha=0.6, color=color, label=f"{label} (n={values.size})")
        if name in thresholds:  # off the data's range it shows in the legend only
            ax.axvline(thresholds[name], color="#c0392b", linestyle="--", linewidth=1,
                       label=f"minimum {thresholds[name]:g}")
        ax.set_xlim(bins[0], bins[-1])
        ax.legend(fontsize=8)
    figure.tight_layout()
    return figure


def roc_chart(roc: pl.DataFrame, aucs: Mapping[str, float | None] | None = None) -> Figure:
    """One ROC curve per question of `roc` (question, fpr, tpr: `tasks.judge.calibration.ROC`) over the chance
    diagonal, with its AUC in the legend where `aucs` gives one."""
    figure = new_figure(5.0, 5.0)
    ax = figure.add_subplot()
    ax.set_title("Judge questions vs human labels (ROC)")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    if roc.is_empty():
        no_data(ax, "no human labels yet")
        return figure
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    for (question,), curve in roc.partition_by("question", as_dict=True, maintain_order=True).items():
        auc = (aucs or {}).get(question)
        ax.plot(curve["fpr"], curve["tpr"], label=question if auc is None else f"{question} (AUC {auc:.2f})")
    ax.legend(loc="lower right")
    figure.tight_layout()
    return figure


def example_rows(selected: pl.DataFrame, counterfactuals: pl.DataFrame, limit: int) -> list[dict]:
    """Up to `limit` selected pairs, best clip_dir first (ties: caption_id), with their swap site."""
    site = counterfactuals.select("caption_id", "start", "end", "original_word", "substitute")
    return (selected.select("caption_id", "caption", "counterfactual", "clip_dir", "image_o", "image_c")
            .join(site, on="caption_id", how="left")
            .sort(["clip_dir", "caption_id"], descending=[True, False], nulls_last=True)
            .head(max(limit, 0)).to_dicts())


def wrap(text: str, width: int) -> list[tuple[int, int]]:
    """Greedy line breaks at spaces as (start, end) character ranges; a word longer than `width` is cut."""
    lines, start = [], 0
    while len(text) - start > width:
        cut = text.rfind(" ", start + 1, start + width + 1)
        cut = cut if cut > start else start + width
        lines.append((start, cut))
        start = cut + 1 if text[cut] == " " else cut
    return [*lines, (start, len(text))]


def swap_span(text: str, start: int | None, word: str | None) -> tuple[int, int] | None:
    """[start, start + len(word)) when `word` sits there in `text`, else None (nothing to highlight)."""
    if start is None or not word or text[start:start + len(word)] != word:
        return None
    return start, start + len(word)


def caption_lines(ax: Axes, y: float, label: str, text: str, span: tuple[int, int] | None, color: str) -> float:
    """Draw `label` + wrapped `text` from axes height `y` down, `span` bold in `color`; returns the next free y."""
    s, e = span or (0, 0)
    ranges = wrap(text, WRAP)
    indent = ax.annotate(label, xy=(0, y), xycoords="axes fraction", va="baseline", fontsize=8, color="grey")
    for i, (a, b) in enumerate(ranges[:MAX_LINES]):
        pieces: list[tuple[str, dict[str, Any]]] = [  # Text properties
            (text[a:min(b, s)], {}), (text[max(a, s):min(b, e)], {"color": color, "fontweight": "bold"}),
            (text[max(a, e):b], {}), ("…" if i == MAX_LINES - 1 and len(ranges) > MAX_LINES else "", {})]
        previous = indent  # continuation lines start under the first line's text, not under the label
        for piece, style in pieces:
            if piece:
                previous = ax.annotate(piece, xy=(1, y), xycoords=(previous, "axes fraction"), va="baseline",
                                       fontsize=8, parse_math=False, **style)
        y -= 0.14
    return y


def _image(ax: Axes, path: Path, title: str) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=8)
    if not path.is_file():
        no_data(ax, "image missing")
        return
    ax.imshow(read_rgb(path), interpolation="nearest")


def contact_sheet(rows: list[dict], images_dir: Path) -> Figure:
    """I_o | I_c per pair with C_o / C_c below (original word and substitute highlighted), SHEET_COLUMNS per row."""
    n_rows = max(1, -(-len(rows) // SHEET_COLUMNS))
    height = n_rows * CELL_HEIGHT
    figure = new_figure(SHEET_WIDTH, height)
    if not rows:
        no_data(figure.add_axes((0, 0, 1, 1)), "no selected pairs")
        return figure
    cell_w, side = SHEET_WIDTH / SHEET_COLUMNS, 2.1
    for k, row in enumerate(rows):
        left, top = (k % SHEET_COLUMNS) * cell_w, height - (k // SHEET_COLUMNS) * CELL_HEIGHT
        for j, (column, name) in enumerate((("image_o", "I_o"), ("image_c", "I_c"))):
            ax = figure.add_axes(((left + 0.3 + j * (side + 0.2)) / SHEET_WIDTH, (top - 0.3 - side) / height,
                                  side / SHEET_WIDTH, side / height))
            _image(ax, stored_file(Path(images_dir), row[column]), f"{name}  ({row['caption_id']})" if j == 0 else
                   f"{name}  (clip_dir {row['clip_dir']:.3f})")
        text_ax = figure.add_axes(((left + 0.1) / SHEET_WIDTH, (top - CELL_HEIGHT + 0.05) / height,
                                   (cell_w - 0.2) / SHEET_WIDTH, 1.1 / height))
        text_ax.set_axis_off()
        y = caption_lines(text_ax, 0.85, "C_o: ", row["caption"], swap_span(row["caption"], row["start"],
                                                                         row["original_word"]), HIGHLIGHT["o"])
        caption_lines(text_ax, y - 0.04, "C_c: ", row["counterfactual"],
                      swap_span(row["counterfactual"], row["start"], row["substitute"]), HIGHLIGHT["c"])
    return figure
