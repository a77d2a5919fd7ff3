"""The toy world's truth of a run (`paths.metrics/truth.json`, written by `cfgen truth`) as markdown, for the
datasheet and the README: the headline in words, one row for all edit types and one per type, per-image accuracy by
GenEval family, the checker's failure reasons, and each selection ranking key's accuracy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks.release.markdown import markdown_table, score

HEADER = ("Edit type", "Samples", "Selected pairs", "Pair accuracy (samples)", "Pair accuracy (selected)",
          "Minimality (selected)", "P2P gain", "Filter lift", "Per-image accuracy")


def rated(m: Mapping[str, Any] | None) -> str:
    """A rate as `0.090 (7/77, 0.045–0.18)`; an interval statistic as `0.030 (−0.010–0.070)`; n/a when undefined."""
    if not m or m.get("rate", m.get("value")) is None:
        return "n/a"
    count = f"{m['count']}/{m['of']}, " if "count" in m else ""
    return f"{score(m.get('rate', m.get('value')))} ({count}{score(m['ci95'][0], 2)}–{score(m['ci95'][1], 2)})"


def _row(name: str, m: Mapping[str, Any]) -> tuple:
    return (name, m["samples"], m["selected_pairs"], rated(m["pair_accuracy"]["samples"]),
            rated(m["pair_accuracy"]["selected"]), rated(m["minimality"]["selected"]), rated(m["p2p_gain"]),
            rated(m["filter_lift"]), rated(m["image_accuracy"]["all"]))


def headline(metrics: Mapping[str, Any]) -> str:
    """'selection picked a real counterfactual in N of M pairs'."""
    selected = metrics["pair_accuracy"]["selected"]
    return (f"Selection picked a real counterfactual (I_o shows C_o and not C_c, I_c shows C_c and not C_o) in "
            f"{selected['count']} of {selected['of']} pairs ({rated(selected)}).")


def truth_table(metrics: Mapping[str, Any]) -> str:
    rows = [_row("all", metrics), *(_row(t, m) for t, m in metrics["by_edit_type"].items())]
    checks = [(name, m["rows"], score(m["lift"]), rated(m["accuracy"]), score(m["kappa"])) for name, m in (
        ("both-subjects check (samples)", metrics["both_subjects_check"]), ("VLM judge (selected)", metrics["judge"]))
        if m is not None]
    images = metrics["image_accuracy"]
    families = [(name, rated(m)) for name, m in images["families"].items()] + [("macro mean", score(images["macro"]))]
    keys = [(key, rated(m)) for key, m in metrics["selection_keys"].items()]
    counts = [(k, rated(m)) for k, m in metrics["samples_per_pair"].items()]
    failures = ", ".join(f"{reason} {n}" for reason, n in images["failures"].items()) or "none"
    return "\n\n".join([
        markdown_table(HEADER, rows),
        markdown_table(("GenEval family (per image)", "Accuracy"), families),
        f"Why an image fails its caption (the checker's first failing fact): {failures}.",
        markdown_table(("Selection ranking key", "Pair accuracy of the sample it ranks first"), keys),
        markdown_table(("Samples per pair", "Pair accuracy of the sample rank_by picks"), counts),
        markdown_table(("Filter", "Rows", "Lift", "Accuracy vs truth", "Cohen's kappa vs truth"), checks)])


def section(metrics: Mapping[str, Any] | None) -> str:
    """The datasheet's paragraph: what the checker measured, or that it did not run."""
    if not metrics or not metrics.get("enabled"):
        return "Ground truth: not measured (`truth.enabled`; only the toy world of the demo profile has one)."
    return (f"Ground truth: {headline(metrics)} The toy world's checker reads every generated sample and every "
            "selected pair back into shapes, colours, sizes and places with plain image analysis. A pair is accurate "
            "only when it shows its edit (a copy of I_o as I_c never is); minimality is the share of accurate pairs "
            "whose objects the two captions share stay the same and in place; P2P gain is the share of samples that "
            "are accurate and minimal with attention sharing minus without (same seeds); filter lift is the pair "
            "accuracy of the selected pairs over that of all samples. Each rate shows its count and 95% interval "
            "(Wilson; P2P gain and lift: caption pairs resampled).\n\n" + truth_table(metrics))
