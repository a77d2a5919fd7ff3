"""The toy world's truth of a run (`paths.metrics/truth.json`, written by `cfgen truth`) as markdown: one row for
all edit types and one per type, for the datasheet and the README."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks.release.markdown import markdown_table, score

HEADER = ("Edit type", "Samples", "Selected pairs", "Pair accuracy (samples)", "Pair accuracy (selected)",
          "Minimality (selected)", "P2P gain", "Filter lift")


def _row(name: str, m: Mapping[str, Any]) -> tuple:
    return (name, m["samples"], m["selected_pairs"], score(m["pair_accuracy"]["samples"]),
            score(m["pair_accuracy"]["selected"]), score(m["minimality"]["selected"]), score(m["p2p_gain"]),
            score(m["filter_lift"]))


def truth_table(metrics: Mapping[str, Any]) -> str:
    rows = [_row("all", metrics), *(_row(t, m) for t, m in metrics["by_edit_type"].items())]
    checks = [(name, m["rows"], score(m["lift"]), score(m["accuracy"]), score(m["kappa"])) for name, m in (
        ("both-subjects check (samples)", metrics["both_subjects_check"]), ("VLM judge (selected)", metrics["judge"]))
        if m is not None]
    return (markdown_table(HEADER, rows) + "\n\n"
            + markdown_table(("Filter", "Rows", "Lift", "Accuracy vs truth", "Cohen's kappa vs truth"), checks))


def section(metrics: Mapping[str, Any] | None) -> str:
    """The datasheet's paragraph: what the checker measured, or that it did not run."""
    if not metrics or not metrics.get("enabled"):
        return "Ground truth: not measured (`truth.enabled`; only the toy world of the demo profile has one)."
    return ("Ground truth (the toy world's checker reads every generated sample and every selected pair back into "
            "shapes, colours, sizes and places with plain image analysis): pair accuracy is the share of pairs whose "
            "I_o shows C_o and I_c shows C_c; minimality, the share of accurate pairs whose objects the two captions "
            "share stay the same and in place; P2P gain, minimality with attention sharing minus without (same "
            "seeds); filter lift, the pair accuracy of the selected pairs over that of all samples.\n\n"
            + truth_table(metrics))
