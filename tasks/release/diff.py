"""Dataset diff between two versions (a -> b) of the pipeline's outputs, as a dict, Markdown or HTML.

A version is (counterfactuals, selected, metrics): the perplexity stage's frame, the selection stage's frame and the
run's metrics dict. Rows are matched by caption_id (unique in each frame). Categories are disjoint: a counterfactual
is `changed` when its C_o or C_c text differs; a selected pair is `caption_changed` when its C_o or C_c differs, else
`image_changed` when image_o or image_c differs (the store is content-addressed: another path means other pixels).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import polars as pl

DIGITS = 6
# a metric that moved by at most this share of its size moved by float rounding alone: what another CPU's or GPU's
# kernels (or a float32 score on another library build) change, not what a param or a code change does
ROUNDING = 1e-5
TEXT = ["caption", "counterfactual"]
IMAGES = ["image_o", "image_c"]
CATEGORIES = {"counterfactuals": ("added", "removed", "changed"),
              "pairs": ("added", "removed", "caption_changed", "image_changed")}


class Version(NamedTuple):
    counterfactuals: pl.DataFrame
    selected: pl.DataFrame
    metrics: dict


def _keyed(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    if frame["caption_id"].is_duplicated().any():
        raise ValueError(f"{name}: caption_id is not unique")
    return frame


def _differs(columns: list[str]) -> pl.Expr:
    return pl.any_horizontal(pl.col(c).ne_missing(pl.col(f"{c}_b")) for c in columns)


def _compare(a: pl.DataFrame, b: pl.DataFrame, checks: dict[str, list[str]]) -> dict[str, pl.DataFrame]:
    """caption_id frames per category: added, removed, then each `checks` category (first match wins), unchanged."""
    joined = a.join(b, on="caption_id", how="inner", suffix="_b")
    out = {"added": b.join(a, on="caption_id", how="anti"), "removed": a.join(b, on="caption_id", how="anti")}
    for category, columns in checks.items():
        hit = _differs(columns)
        out[category], joined = joined.filter(hit), joined.filter(~hit)
    return {**{k: v.select("caption_id").sort("caption_id") for k, v in out.items()},
            "unchanged": joined.select("caption_id")}


def _flatten(metrics: Mapping, prefix: str = "") -> dict[str, float]:
    """Numeric leaves (not bools, finite) by dotted path."""
    out = {}
    for key, value in metrics.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{path}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[path] = value
    return out


def _examples(ids: pl.DataFrame, a: Version, b: Version, limit: int) -> list[dict]:
    """Per caption_id: C_o, C_c and substitute in a and b (None where absent), clip_dir of the selected pairs."""
    rows = ids.head(limit)
    for side, version in (("a", a), ("b", b)):
        texts = version.counterfactuals.select("caption_id", *TEXT, "substitute")
        pair = version.selected.select("caption_id", *TEXT, "clip_dir")
        rows = (rows.join(texts, on="caption_id", how="left", maintain_order="left")
                .join(pair, on="caption_id", how="left", suffix="_pair", maintain_order="left")
                .with_columns(pl.coalesce(c, f"{c}_pair").alias(c) for c in TEXT)  # a pair without its C_c row
                .drop(*(f"{c}_pair" for c in TEXT))
                .rename({c: f"{c}_{side}" for c in (*TEXT, "substitute", "clip_dir")}))
    return rows.select("caption_id", pl.coalesce("caption_b", "caption_a").alias("caption"),
                       *(f"{c}_{s}" for c in ("counterfactual", "substitute") for s in "ab"),
                       *(pl.col(f"clip_dir_{s}").round(DIGITS) for s in "ab")).to_dicts()


def _pair_categories(a: Version, b: Version) -> dict[str, pl.DataFrame]:
    return _compare(_keyed(a.selected, "a.selected").select("caption_id", *TEXT, *IMAGES),
                    _keyed(b.selected, "b.selected").select("caption_id", *TEXT, *IMAGES),
                    {"caption_changed": TEXT, "image_changed": IMAGES})


def pair_changes(a: Version | tuple, b: Version | tuple) -> dict[str, str]:
    """caption_id -> the category of its selected pair, for every pair not unchanged."""
    return {caption_id: category.replace("_", " ") for category, ids in _pair_categories(Version(*a), Version(*b))
            .items() if category != "unchanged" for caption_id in ids["caption_id"]}


def diff_versions(a: Version | tuple, b: Version | tuple, max_examples: int = 10) -> dict:
    """Counts per category for counterfactual captions and selected pairs, metric deltas, example rows."""
    a, b = Version(*a), Version(*b)
    cf = _compare(_keyed(a.counterfactuals, "a.counterfactuals").select("caption_id", *TEXT),
                  _keyed(b.counterfactuals, "b.counterfactuals").select("caption_id", *TEXT), {"changed": TEXT})
    pairs = _pair_categories(a, b)
    flat_a, flat_b = _flatten(a.metrics), _flatten(b.metrics)
    return {
        "counterfactuals": {"a": a.counterfactuals.height, "b": b.counterfactuals.height,
                            **{k: v.height for k, v in cf.items()}},
        "pairs": {"a": a.selected.height, "b": b.selected.height, **{k: v.height for k, v in pairs.items()}},
        "metrics": [{"metric": key, "a": flat_a[key], "b": flat_b[key],
                     "delta": round(flat_b[key] - flat_a[key], DIGITS), "rounding": _rounding(flat_a[key], flat_b[key])}
                    for key in sorted(flat_a.keys() & flat_b.keys())],
        "metrics_only_a": sorted(flat_a.keys() - flat_b.keys()),
        "metrics_only_b": sorted(flat_b.keys() - flat_a.keys()),
        "examples": {f"{group}.{category}": _examples(frames[category], a, b, max_examples)
                     for group, frames in (("counterfactuals", cf), ("pairs", pairs))
                     for category in CATEGORIES[group]},
    }


def _rounding(a: float, b: float) -> bool:
    """Moved, by float rounding alone (`ROUNDING`)."""
    return a != b and abs(b - a) <= ROUNDING * max(1.0, abs(a), abs(b))


def _number(value: Any, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.6g}" if signed else (f"{value:.6g}" if isinstance(value, float) else str(value))


def _change(row: dict, column: str, number: bool = False) -> str:
    a, b = (_number(row[f"{column}_{s}"]) if number else (row[f"{column}_{s}"] or "–") for s in "ab")
    return a if a == b else f"{a} → {b}"


def _sections(diff: dict, label_a: str, label_b: str) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """(title, note, header, rows) of plain-text cells: what both renderers lay out."""
    cf, pairs = diff["counterfactuals"], diff["pairs"]
    changed = pairs["caption_changed"] + pairs["image_changed"]
    summary = [["counterfactual captions", *(str(cf[k]) for k in ("a", "b", "added", "removed", "changed",
                                                                  "unchanged"))],
               ["selected pairs", str(pairs["a"]), str(pairs["b"]), str(pairs["added"]), str(pairs["removed"]),
                f"{changed} ({pairs['caption_changed']} caption, {pairs['image_changed']} image)",
                str(pairs["unchanged"])]]
    moved = [m for m in diff["metrics"] if m["delta"] != 0 and not m["rounding"]]
    rounded = [m for m in diff["metrics"] if m["rounding"]]
    note = f"{len(diff['metrics']) - len(moved) - len(rounded)} of {len(diff['metrics'])} shared metrics unchanged."
    for side, label in (("a", label_a), ("b", label_b)):
        if diff[f"metrics_only_{side}"]:
            note += f" Only in {label}: {', '.join(diff[f'metrics_only_{side}'])}."
    sections = [("Summary", "", ["", label_a, label_b, "added", "removed", "changed", "unchanged"], summary),
                ("Metrics", note, ["metric", label_a, label_b, "delta"],
                 [[m["metric"], _number(m["a"]), _number(m["b"]), _number(m["delta"], signed=True)] for m in moved])]
    if rounded:
        sections.append(("Metrics moved by float rounding only", f"At most {ROUNDING:g} of their size: another "
                         "machine's kernels, not a change of params, code or models.", ["metric", label_a, label_b],
                         [[m["metric"], repr(m["a"]), repr(m["b"])] for m in rounded]))
    for key, rows in diff["examples"].items():
        group, category = key.split(".")
        total = diff[group][category]
        if total:
            sections.append((f"{group}: {category.replace('_', ' ')} ({total})",
                             f"First {len(rows)} by caption_id." if len(rows) < total else "",
                             ["caption_id", "C_o", f"C_c ({label_a})", f"C_c ({label_b})", "substitute", "clip_dir"],
                             [[r["caption_id"], r["caption"] or "–", r["counterfactual_a"] or "–",
                               r["counterfactual_b"] or "–", _change(r, "substitute"), _change(r, "clip_dir", True)]
                              for r in rows]))
    return sections


def _md_cell(text: str) -> str:
    return html.escape(text, quote=False).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def to_markdown(diff: dict, label_a: str, label_b: str) -> str:
    """GitHub-flavoured Markdown; cell text is HTML-escaped and pipes are escaped."""
    lines = [f"# Dataset diff: {_md_cell(label_a)} → {_md_cell(label_b)}"]
    for title, note, header, rows in _sections(diff, label_a, label_b):
        lines += ["", f"## {_md_cell(title)}", ""] + ([_md_cell(note), ""] if note else [])
        if rows:
            lines += ["| " + " | ".join(map(_md_cell, header)) + " |", "|" + " --- |" * len(header)]
            lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
        else:
            lines.append("No rows.")
    return "\n".join(lines) + "\n"


def to_html(diff: dict, label_a: str, label_b: str) -> str:
    """One self-contained HTML page (inline style, no scripts); every text is escaped."""
    esc = html.escape
    title = f"Dataset diff: {esc(label_a)} → {esc(label_b)}"
    body = [f"<h1>{title}</h1>"]
    for heading, note, header, rows in _sections(diff, label_a, label_b):
        body.append(f"<h2>{esc(heading)}</h2>" + (f"<p>{esc(note)}</p>" if note else ""))
        if rows:
            cells = ["<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"]
            cells += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows]
            body.append("<table>" + "\n".join(cells) + "</table>")
        else:
            body.append("<p>No rows.</p>")
    style = ("body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin-bottom:1em}"
             "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f2f2f2}")
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{style}</style></head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")
