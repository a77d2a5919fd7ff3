"""The datasheet (Gebru et al., "Datasheets for Datasets"; paper App. C) and the Hub dataset card, generated from a run.

Everything in them comes from the arguments: funnel counts, per-stage metrics, resolved params, model ids, the
altered-subject table. Absolute paths are cut to their last component and params whose key names a secret are
redacted, so the text holds no machine-specific path and no credential.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import date
from typing import Any

import polars as pl
import yaml

from tasks.core.params import DatasheetParams, ExportParams, Params
from tasks.core.schemas import ITM_DELTAS
from tasks.core.stages import STAGES
from tasks.release.report import FUNNEL_STEPS

SIZE_CATEGORIES = ((10**3, "n<1K"), (10**4, "1K<n<10K"), (10**5, "10K<n<100K"), (10**6, "100K<n<1M"),
                   (10**7, "1M<n<10M"), (10**8, "10M<n<100M"), (10**9, "100M<n<1B"))
_ABSOLUTE = re.compile(r"(?<![\w.~:/\\-])(?:~|[A-Za-z]:)?[/\\][^\s`'\"|]+")
PAPER_MIXTURE_TRAIN = {"base": 13_928, "medium": 34_820, "all": 41_784}
_SECRET_KEY = re.compile(r"token|secret|password", re.IGNORECASE)


def altered_subjects(counterfactuals: pl.DataFrame, selected_ids: list[str] | None) -> pl.DataFrame:
    """(original_word, substitute, count, share) over lower-cased words, most frequent first, ties alphabetical."""
    rows = counterfactuals if selected_ids is None else counterfactuals.filter(pl.col("caption_id").is_in(selected_ids))
    return (rows.group_by(original_word=pl.col("original_word").str.to_lowercase(),
                          substitute=pl.col("substitute").str.to_lowercase())
            .agg(count=pl.len().cast(pl.Int64))
            .with_columns(share=pl.col("count") / pl.col("count").sum())
            .sort(["count", "original_word", "substitute"], descending=[True, False, False]))


def human_share(table: pl.DataFrame, human_words: tuple[str, ...]) -> float:
    """Share of substitutions (weighted by count) whose original word or substitute is a human-related noun."""
    total = table["count"].sum()
    words = pl.Series(list(human_words), dtype=pl.String).str.to_lowercase().implode()
    human = table.filter(pl.col("original_word").is_in(words) | pl.col("substitute").is_in(words))["count"].sum()
    return human / total if total else 0.0


def public(text: str) -> str:
    """`text` with every absolute path (`/…`, `~/…`, `C:\\…`) cut to `…/<last component>`."""
    return _ABSOLUTE.sub(lambda m: "…/" + re.split(r"[/\\]", m.group(0).rstrip("/\\"))[-1], text)


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|")


def _table(header: tuple[str, ...], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows])


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested params -> {"dotted.key": leaf}; an empty mapping is a leaf."""
    out = {}
    for key, value in params.items():
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _param_lines(params: Mapping[str, Any]) -> str:
    lines = []
    for key, value in flatten(params).items():
        shown = "<redacted>" if _SECRET_KEY.search(key) else value if isinstance(value, str) else json.dumps(value)
        lines.append(f"{key} = {shown}")
    return "```\n" + "\n".join(lines) + "\n```"


def _funnel(funnel: dict[str, int]) -> str:
    first = next(iter(funnel.values()), 0)
    return _table(("Step", "Count", "Share of input"),
                  [(step, n, f"{n / first:.1%}" if first else "n/a") for step, n in funnel.items()])


def _rejects(stage_metrics: dict[str, dict]) -> str:
    rows = [(stage, m.get("rows_in", ""), m.get("rows_out", ""), reason, count)
            for stage, m in stage_metrics.items() for reason, count in (m.get("rejects") or {"(none)": 0}).items()]
    return _table(("Stage", "Rows in", "Rows out", "Reject reason", "Count"), rows)


def _evaluation(evaluation: Mapping[str, Any] | None) -> str:
    """Per model and retrieval set: R@k (×100) and, for `all` against `real`, the relative change; ITM shares < 0."""
    if not evaluation:
        return "Not evaluated in this run."
    keys = sorted(next((m["all"] for m in evaluation["models"].values() if m.get("all")), {}),
                  key=lambda k: (not k.startswith("text"), int(k.rpartition("@")[2])))
    rows = []
    for name, m in evaluation["models"].items():
        for subset in ("all", "validated", "real"):
            if m.get(subset):
                relative = m.get("relative", {}) if subset == "all" else {}
                rows.append((name + (" (the filter's CLIP)" if m["used_to_filter"] else ""), subset,
                             *(f"{m[subset][k]:.1f}" + (f" ({relative[k]:+.0%})" if relative.get(k) is not None
                                                       else "") for k in keys)))
    itm = [(name, *(f"{m['itm'][d]['share_negative']:.0%}" if m["itm"][d]["share_negative"] is not None else "n/a"
                    for d in ITM_DELTAS)) for name, m in evaluation["models"].items()]
    return (f"Zero-shot retrieval on {evaluation['pairs']} pairs (both images and both captions; R@k × 100, relative "
            "change against the real COCO pairs in parentheses):\n\n"
            f"{_table(('Model', 'Set', *keys), rows)}\n\n"
            "Share of pairs where the model prefers the wrong caption or image (Δ < 0, paper Fig. 3):\n\n"
            f"{_table(('Model', *ITM_DELTAS), itm)}")


def _limitations(params: Mapping[str, Any]) -> list[str]:
    demo = ["**Demo profile**: tiny random text, diffusion and CLIP models built offline; counterfactual captions, "
            "images and CLIP scores are noise that only exercises the pipeline. Do not use it for any evaluation."]
    return (demo if params.get("profile") == "demo" else []) + [
        "Each counterfactual changes exactly one noun (a single-token MLM fill); attributes, verbs, counts and "
        "multi-word edits are not covered.",
        "Substitution sites come from NLTK part-of-speech tags, which mis-tag some words, so some swaps are not "
        "nouns or yield ungrammatical captions.",
        "Image pairs are filtered and selected with CLIP similarities, so the data inherits CLIP's biases and "
        "blind spots; an accepted pair can still fail to depict the swap.",
        "The masked LM, sentence encoder and language model carry the biases of their web-text training data, "
        "which shape which substitutes are proposed and kept.",
        "Generated images may contain artefacts, unrealistic content or unintended depictions of people.",
    ]


def render_datasheet(funnel: dict[str, int], stage_metrics: dict[str, dict], params: dict, models: dict[str, str],
                     table: pl.DataFrame, human_share: float, created: str, dp: DatasheetParams,
                     evaluation: Mapping[str, Any] | None = None) -> str:
    """Markdown datasheet: the seven Gebru et al. sections, filled from this run (`evaluation`: the evaluate
    stage's metrics, when it ran)."""
    final = list(funnel.values())[-1] if funnel else 0
    top = [(row["original_word"], row["substitute"], row["count"], f"{row['share']:.1%}")
           for row in table.head(dp.top_subjects).iter_rows(named=True)]
    sections = {
        "Motivation": (
            "Counterfactual image-text pairs for evaluating and training multimodal models, regenerated with the "
            "method of COCO-Counterfactuals (Le, Lal, Howard; NeurIPS 2023 Datasets and Benchmarks). Each instance "
            "pairs an MS-COCO caption C_o with a minimally edited counterfactual C_c (one noun replaced) and two "
            "images (I_o, I_c) that ideally differ only in what the edit changes, so a model must tell the pair "
            "apart by the single changed concept."),
        "Composition": (
            f"{final} instances (pairs), created {created}. Fields: `id`, `image_0` (I_o), `image_1` (I_c), "
            "`caption_0` (C_o), `caption_1` (C_c), then provenance: COCO `image_id`, the swapped `original_word` and "
            "`substitute` with its token `position`, MLM score, sentence similarity, perplexity, the CLIP scores of "
            "the accepted image pair, its sampling seed, p2p fraction and guidance scale, and the model ids.\n\n"
            f"Pipeline funnel:\n\n{_funnel(funnel)}\n\n"
            f"Most frequent altered subjects (top {dp.top_subjects}, lower-cased):\n\n"
            f"{_table(('Original', 'Substitute', 'Count', 'Share'), top)}\n\n"
            f"Human-related substitutions (original or substitute a human noun): {human_share:.1%}. Captions and "
            "images may describe or depict people; no names or other personal data are added."),
        "Collection Process": (
            "Captions come from MS-COCO. Nouns are found with NLTK tagging; a masked LM proposes single-token fills; "
            "fills are kept within a sentence-similarity window and the lowest-perplexity fill becomes C_c. Each "
            "(C_o, C_c) is rendered many times with paired Prompt-to-Prompt diffusion (random seed, guidance scale "
            "and p2p fraction per sample) and the best CLIP-filtered sample is kept.\n\n"
            "Models (the `model_<role>` columns):\n\n"
            f"{_table(('Role', 'Model (id@revision)'), [(k.removeprefix('model_'), v) for k, v in models.items()])}\n\n"
            "Rows in and out of each stage, and why rows were dropped:\n\n"
            f"{_rejects(stage_metrics)}"),
        "Preprocessing/Cleaning/Labeling": (
            "No manual labelling: every filter is automatic and logged as a reject with its reason (above). Images "
            "are stored as lossless PNG exactly as generated. All parameters of this run (resolved params.yaml):\n\n"
            f"{_param_lines(params)}"),
        "Uses": (
            "Intended: zero-shot evaluation of image-text matching and retrieval on hard negatives, and training "
            "data augmentation, as in the paper. Not intended: any use that treats the generated images as real "
            "photographs or as depictions of real people.\n\n"
            f"{_evaluation(evaluation)}\n\nKnown limitations:\n\n"
            + "\n".join(f"- {item}" for item in _limitations(params))),
        "Distribution": (
            "Parquet shards in the Hugging Face `datasets` layout (`data/train-*.parquet`, images embedded). "
            "Captions derive from the MS-COCO annotations (CC BY 4.0) and are released under CC BY 4.0. Generated "
            "images are subject to the Stable Diffusion CreativeML OpenRAIL-M license and its use restrictions."),
        "Maintenance": (
            "Generated by the DVC pipeline of this project: rerun it (`dvc repro`) with the parameters above to "
            "regenerate the data and this datasheet. Errata and changes are tracked in the project's repository."),
    }
    return public("# Datasheet\n\n" + "\n\n".join(f"## {name}\n\n{body}" for name, body in sections.items()) + "\n")


def size_category(n_rows: int) -> str:
    """The Hub's size category: n<1K, 1K<n<10K, … (a boundary value goes to the larger category)."""
    return next((name for limit, name in SIZE_CATEGORIES if n_rows < limit), "n>1B")


def _mixture_configs(sizes: Mapping[str, Mapping[str, int]]) -> tuple[list[dict], str]:
    """(Hub configs of the training mixtures, a markdown table of their sizes beside the paper's train sizes)."""
    names = sorted(sizes, key=lambda n: list(PAPER_MIXTURE_TRAIN).index(n))  # base, medium, all
    configs = [{"config_name": f"mixture_{name}", "data_files": [
        {"split": split, "path": f"mixtures/{name}/{split}-*.parquet"} for split in ("train", "validation")]}
        for name in names]
    rows = [(name, sizes[name]["train"], sizes[name]["validation"], f"{PAPER_MIXTURE_TRAIN[name]:,}") for name in names]
    table = _table(("Mixture", "Train rows", "Validation rows", "Paper train rows (full scale)"), rows)
    return configs, ("Training mixtures of real and counterfactual rows (paper App. B.4.1; a caption's rows are "
                     f"always in one split):\n\n{table}")


def dataset_card(datasheet_md: str, n_rows: int, export: ExportParams,
                 mixtures: Mapping[str, Mapping[str, int]] | None = None) -> str:
    """README.md of the dataset folder: Hub YAML front matter, a short intro (with the training mixtures' sizes
    when they were built), the datasheet."""
    configs, mixture_table = _mixture_configs(mixtures) if mixtures else ([], "")
    meta = {
        "license": export.license, "pretty_name": export.pretty_name, "language": ["en"],
        "task_categories": ["image-to-text", "text-to-image", "zero-shot-image-classification"],
        "size_categories": [size_category(n_rows)], "tags": ["counterfactual", "coco", "synthetic"],
        "configs": [{"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*.parquet"}]},
                    *configs],
    }
    source = export.repo_id or "path/to/this/folder"
    intro = (f"# {export.pretty_name}\n\n{n_rows} counterfactual image-text pairs (I_o, C_o, I_c, C_c) in the "
             "COCO-Counterfactuals schema, regenerated with this project's pipeline.\n\n"
             f"```python\nfrom datasets import load_dataset\nds = load_dataset(\"{source}\", split=\"train\")\n```")
    intro += f"\n\n{mixture_table}" if mixture_table else ""
    return f"---\n{yaml.safe_dump(meta, sort_keys=False)}---\n\n{intro}\n\n{datasheet_md}"


def write(run: Mapping[str, Any], counterfactuals: pl.DataFrame, exported: list[str], models: dict[str, str],
          params: Params, evaluation: Mapping[str, Any] | None = None,
          mixtures: Mapping[str, Mapping[str, int]] | None = None) -> None:
    """The datasheet (`paths.datasheet`) and the dataset card that embeds it (export folder README.md).

    Counts come from the report's metrics (`run`: funnel, per-stage metrics); `final` is what the export holds.
    """
    paths = params.paths
    funnel = {step: run["funnel"][step] for step in FUNNEL_STEPS} | {"final": len(exported)}
    if funnel["final"] > funnel["with_accepted_pair"]:
        raise ValueError(f"export holds {funnel['final']} pairs but only {funnel['with_accepted_pair']} were accepted")
    table = altered_subjects(counterfactuals, exported)
    stages = {stage: run["stages"][stage] for stage in STAGES}  # DAG order (the JSON is key-sorted)
    sheet = render_datasheet(funnel, stages, params.model_dump(mode="json"), models, table,
                             human_share(table, params.datasheet.human_words), date.today().isoformat(),
                             params.datasheet, evaluation)
    paths.datasheet.parent.mkdir(parents=True, exist_ok=True)
    paths.datasheet.write_text(sheet)
    (paths.export / "README.md").write_text(dataset_card(sheet, len(exported), params.export, mixtures))
