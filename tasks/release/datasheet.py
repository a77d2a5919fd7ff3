"""The datasheet (Gebru et al., "Datasheets for Datasets"; paper App. C) and the Hub dataset card, generated from a run.

Everything in them comes from the arguments: funnel counts, per-stage metrics, resolved params, model ids, the
altered-subject table. Absolute paths are cut to their last component and params whose key names a secret are
redacted, so the text holds no machine-specific path and no credential.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, cast

import polars as pl

from tasks.core.edits import described, edited_word
from tasks.core.licenses import License
from tasks.core.schemas import ITM_DELTAS
from tasks.core.writing import write_text
from tasks.release import ground_truth
from tasks.release.card import DEMO_NOTICE
from tasks.release.markdown import markdown_table, param_lines, public, score
from tasks.release.params import DatasheetParams
from tasks.release.provenance import model_licenses
from tasks.release.report import FUNNEL_STEPS, TYPE_STEPS
from tasks.stages import Params, steps


def altered_subjects(counterfactuals: pl.DataFrame, selected_ids: list[str] | None) -> pl.DataFrame:
    """(edit_type, original_word, substitute, count, share) over lower-cased edited words (`edited_word`; an insert's
    original and a deletion's substitute are empty), most frequent first, ties alphabetical."""
    rows = counterfactuals if selected_ids is None else counterfactuals.filter(pl.col("caption_id").is_in(selected_ids))
    words = {column: pl.struct(column, "edit_type").map_elements(
        lambda r, c=column: edited_word(r[c], r["edit_type"]),  # type: ignore[misc]  # mypy#15459: c's default
        return_dtype=pl.String).str.to_lowercase() for column in ("original_word", "substitute")}
    return (rows.group_by("edit_type", **words)  # type: ignore[arg-type]  # mypy: **words might be maintain_order
            .agg(count=pl.len().cast(pl.Int64))
            .with_columns(share=pl.col("count") / pl.col("count").sum())
            .sort(["count", "edit_type", "original_word", "substitute"], descending=[True, False, False, False]))


def human_share(table: pl.DataFrame, human_words: tuple[str, ...]) -> float:
    """Share of substitutions (weighted by count) whose original word or substitute is a human-related noun."""
    total = cast(int, table["count"].sum())  # an Int64 column's sums
    words = pl.Series(list(human_words), dtype=pl.String).str.to_lowercase().implode()
    human = cast(int, table.filter(pl.col("original_word").is_in(words) | pl.col("substitute").is_in(words))["count"]
                 .sum())
    return human / total if total else 0.0


def _funnel(funnel: dict[str, int]) -> str:
    first = next(iter(funnel.values()), 0)
    return markdown_table(("Step", "Count", "Share of input"),
                  [(step, n, f"{n / first:.1%}" if first else "n/a") for step, n in funnel.items()])


def _rejects(stage_metrics: dict[str, dict]) -> str:
    rows = [(stage, m.get("rows_in", ""), m.get("rows_out", ""), reason, count)
            for stage, m in stage_metrics.items() for reason, count in (m.get("rejects") or {"(none)": 0}).items()]
    return markdown_table(("Stage", "Rows in", "Rows out", "Reject reason", "Count"), rows)


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
            f"{markdown_table(('Model', 'Set', *keys), rows)}\n\n"
            "Share of pairs where the model prefers the wrong caption or image (Δ < 0, paper Fig. 3):\n\n"
            f"{markdown_table(('Model', *ITM_DELTAS), itm)}")


def _validation(result: Mapping[str, Any] | None) -> str:
    """Coverage, paper Table 1 (labels per image source), Fleiss' kappa on the overlap images, validated pairs."""
    if not result or not result["coverage"]["rated"]:
        return "Human validation (Label Studio): no annotations yet."
    rows = [(r["images"], r["label"], r["count"], f"{r['share']:.1%}" if r["share"] is not None else "n/a")
            for r in result["table1"]]
    kappa = score(result["fleiss_kappa"])
    return (f"Human validation (Label Studio, paper Table 1): {result['coverage']['rated']} of "
            f"{result['coverage']['images']} images rated; Fleiss' kappa {kappa} on {result['overlap_images']} images "
            f"rated three times; {result['validated_pairs']} pairs validated (both images matched to their own "
            f"caption; the `validated` config).\n\n{markdown_table(('Images', 'Label', 'Count', 'Share'), rows)}")


JUDGE_QUESTION_TEXT = {"original_o": "I_o shows C_o's word", "substitute_c": "I_c shows C_c's word",
                       "substitute_o": "I_o shows C_c's word", "original_c": "I_c shows C_o's word"}


def _judge(result: Mapping[str, Any] | None) -> str:
    """The VLM judge: its questions, rejects and, against the people's majority labels, its agreement, per-question
    AUC and κ, and the κ-best thresholds (reported, not applied)."""
    if not result or not result["enabled"]:
        return "VLM judge: off in this run (`judge.enabled`)."
    text = (f"VLM judge ({result['model']}): four yes/no questions per pair (does I_o show C_o's edited word, I_c "
            "C_c's, and the two crossed), each answered by P(Yes) from the next-token logits of \"Yes\" and \"No\"; "
            f"{result['rows_out']} of {result['pairs']} pairs pass the thresholds (the `judged` config).")
    agreed = result["agreement"]
    if not agreed or not agreed["pairs_compared"]:
        return text + " No pair has both images labelled by people yet, so its agreement is not measured."
    rows = [(name, score(agreed[key])) for name, key in (
        ("Accuracy", "accuracy"), ("Cohen's kappa", "cohen_kappa"), ("Precision of its rejects", "reject_precision"),
        ("Recall of people's rejects", "reject_recall"), ("Kappa at the kappa-best thresholds",
                                                          "kappa_at_best_thresholds"))]
    questions = [(JUDGE_QUESTION_TEXT[q], m["images"], score(m["auc"]), score(m["kappa"]), m["threshold"],
                  score(m["best_threshold"], 4), score(m["best_kappa"])) for q, m in agreed["questions"].items()]
    return (f"{text}\n\nAgainst the people's majority verdict on {agreed['pairs_compared']} pairs (a pair passes "
            "when both images were matched to their own caption):\n\n"
            f"{markdown_table(('Agreement', 'Value'), rows)}\n\nPer question, against the people's labels of "
            f"{agreed['images_compared']} images (the kappa-best thresholds are reported, never applied):\n\n"
            + markdown_table(("Question", "Images", "AUC", "Kappa", "Threshold", "Kappa-best threshold",
                              "Best kappa"), questions))


def _edit_types(by_type: Mapping[str, Mapping[str, int]], types: list[str]) -> str:
    rows = [(t, described(t)[0], *(by_type.get(t, {}).get(step, 0) for step in TYPE_STEPS)) for t in types]
    text = ("Edit types (rows of each at every step: sites, candidates and similarity survivors compete within a "
            "caption, one C_c per caption):\n\n" + markdown_table(("Type", "Edit", *TYPE_STEPS), rows))
    return "\n\n".join([text, *(caveat for t in types if (caveat := described(t)[1]))])


def _limitations(params: Mapping[str, Any]) -> list[str]:
    demo = [f"{DEMO_NOTICE} The ground truth above says how many pairs are real counterfactuals."]
    covered = ", ".join(params["sites"]["types"])
    return (demo if params.get("profile") == "demo" else []) + [
        f"Each counterfactual makes one edit of the types that ran ({covered}), one span each (a swap: two words "
        "exchanged); multi-site and free-form rewrites are not covered.",
        "Edit sites come from NLTK part-of-speech tags and chunks, which mis-tag some words, so some edits hit the "
        "wrong word class or yield ungrammatical captions.",
        "Image pairs are filtered and selected with CLIP similarities, so the data inherits CLIP's biases and "
        "blind spots; an accepted pair can still fail to depict the swap.",
        "The masked LM, sentence encoder and language model carry the biases of their web-text training data, "
        "which shape which substitutes are proposed and kept.",
        "Generated images may contain artefacts, unrealistic content or unintended depictions of people.",
    ]


def _models(models: Mapping[str, str], licenses: Mapping[str, License]) -> str:
    """Each model's role, content identity and license (with its link)."""
    return markdown_table(("Role", "Model (id@revision)", "License"),
                          [(k.removeprefix("model_"), v, licenses[k.removeprefix("model_")].markdown())
                           for k, v in models.items() if k.startswith("model_")])


@dataclass(frozen=True)
class Sources:
    """What a datasheet is filled from: the funnel, per-stage metrics (rows in and out, rejects), resolved params,
    `models` (the provenance columns), `licenses` (each `model_<role>`'s role -> its license), the altered-subject
    `table` and its `human_share`, the creation date, `dp`; the evaluate, validation, judge and truth stages' results
    when they ran, and `by_edit_type` (the report's per-type funnel)."""

    funnel: dict[str, int]
    stage_metrics: dict[str, dict]
    params: dict
    models: dict[str, str]
    licenses: Mapping[str, License]
    table: pl.DataFrame
    human_share: float
    created: str
    dp: DatasheetParams
    evaluation: Mapping[str, Any] | None = None
    validation: Mapping[str, Any] | None = None
    by_edit_type: Mapping[str, Mapping[str, int]] | None = None
    judge: Mapping[str, Any] | None = None
    truth: Mapping[str, Any] | None = None


def motivation(s: Sources) -> str:
    return ("Counterfactual image-text pairs for evaluating and training multimodal models, regenerated with the "
            "method of COCO-Counterfactuals (Le, Lal, Howard; NeurIPS 2023 Datasets and Benchmarks). Each instance "
            "pairs an MS-COCO caption C_o with a minimally edited counterfactual C_c (one edit, below) and two "
            "images (I_o, I_c) that ideally differ only in what the edit changes, so a model must tell the pair "
            "apart by the single changed concept.")


def composition(s: Sources) -> str:
    final = list(s.funnel.values())[-1] if s.funnel else 0
    top = [(row["edit_type"], row["original_word"] or "–", row["substitute"] or "–", row["count"],
            f"{row['share']:.1%}") for row in s.table.head(s.dp.top_subjects).iter_rows(named=True)]
    return (f"{final} instances (pairs), created {s.created}. Fields: `id`, `image_0` (I_o), `image_1` (I_c), "
            "`caption_0` (C_o), `caption_1` (C_c), then provenance: COCO `image_id`, the `edit_type`, the edited span "
            "`original_word` of C_o and its rewrite `substitute` with its token `position`, MLM score, sentence "
            "similarity, perplexity, the CLIP scores of the accepted image pair (and the both-subjects margins of a "
            "noun edit or a swap), its sampling seed, p2p fraction and guidance scale, and the model ids.\n\n"
            f"Pipeline funnel:\n\n{_funnel(s.funnel)}\n\n"
            f"{_edit_types(s.by_edit_type or {}, list(s.params['sites']['types']))}\n\n"
            f"Most frequent edits (top {s.dp.top_subjects}, lower-cased; – is an empty span):\n\n"
            f"{markdown_table(('Type', 'Original', 'Substitute', 'Count', 'Share'), top)}\n\n"
            f"Human-related substitutions (original or substitute a human noun): {s.human_share:.1%}. Captions and "
            "images may describe or depict people; no names or other personal data are added.")


def collection(s: Sources) -> str:
    libraries = [(k.removeprefix("library_"), v) for k, v in s.models.items() if k.startswith("library_")]
    return ("Captions come from MS-COCO. Edit sites are found with NLTK tagging (and, when enabled with real images, "
            "kept only on the words an image-text model relies on, AutoCAD-style saliency); a masked LM proposes "
            "single-token fills (rules make counting edits and deletions); "
            f"fills WordNet relates to the original word ({', '.join(s.params['relations']['reject']) or 'none'}) "
            "are dropped, the rest are kept within a sentence-similarity window; each caption's edit type is drawn "
            "with the `perplexity.type_shares` weights among the types it has survivors of, and that type's "
            "lowest-perplexity rewrite becomes C_c. Each (C_o, C_c) is rendered many times with paired "
            "Prompt-to-Prompt diffusion (random seed, guidance scale and p2p fraction per sample) and the best "
            "CLIP-filtered sample is kept; a noun edit must also pass the both-subjects check (CLIP prefers "
            "\"a photo of a {original}\" on I_o and \"a photo of a {substitute}\" on I_c; a swap, on its two "
            "phrases: \"dog on a couch\" against \"couch on a dog\").\n\n"
            f"Models (the `model_<role>` columns) and the licenses they come under:\n\n{_models(s.models, s.licenses)}"
            "\n\nLibraries that decide the pixels and scores (the `library_<name>` columns; part of every cache "
            "key, so another version recomputes instead of mixing outputs):\n\n"
            f"{markdown_table(('Library', 'Version'), libraries)}\n\n"
            f"Rows in and out of each stage, and why rows were dropped:\n\n{_rejects(s.stage_metrics)}")


def labeling(s: Sources) -> str:
    return (f"{_validation(s.validation)}\n\n{_judge(s.judge)}\n\n{ground_truth.section(s.truth)}"
            "\n\nEvery filter is automatic and logged as a reject with its reason (above). Images "
            "are stored as lossless PNG exactly as generated. All parameters of this run (resolved params.yaml):\n\n"
            f"{param_lines(s.params)}")


def uses(s: Sources) -> str:
    return ("Intended: zero-shot evaluation of image-text matching and retrieval on hard negatives, and training "
            "data augmentation, as in the paper. Not intended: any use that treats the generated images as real "
            "photographs or as depictions of real people.\n\n"
            f"{_evaluation(s.evaluation)}\n\nKnown limitations:\n\n"
            + "\n".join(f"- {item}" for item in _limitations(s.params)))


def distribution(s: Sources) -> str:
    return ("Parquet shards in the Hugging Face `datasets` layout (`data/train-*.parquet`, images embedded). "
            "Captions derive from the MS-COCO annotations (CC BY 4.0) and are released under CC BY 4.0. Generated "
            "images are subject to the license of the diffusion model that made them, "
            f"{s.licenses['diffusion'].markdown()}, and its use restrictions; every model's license is listed under "
            "Collection Process.")


def maintenance(s: Sources) -> str:
    return ("Generated by the DVC pipeline of this project: rerun it (`dvc repro`) with the parameters above to "
            "regenerate the data and this datasheet. Errata and changes are tracked in the project's repository.")


# The seven sections of Gebru et al., in their order, each rendered from the run's sources alone.
SECTIONS: dict[str, Callable[[Sources], str]] = {
    "Motivation": motivation, "Composition": composition, "Collection Process": collection,
    "Preprocessing/Cleaning/Labeling": labeling, "Uses": uses, "Distribution": distribution,
    "Maintenance": maintenance}


def render_datasheet(sources: Sources) -> str:
    """Markdown datasheet: the seven Gebru et al. sections (`SECTIONS`), filled from this run."""
    return public("# Datasheet\n\n" + "\n\n".join(f"## {name}\n\n{render(sources)}"
                                                    for name, render in SECTIONS.items()) + "\n")


def write(run: Mapping[str, Any], counterfactuals: pl.DataFrame, exported: list[str], models: dict[str, str],
          params: Params, evaluation: Mapping[str, Any] | None = None,
          validation: Mapping[str, Any] | None = None, judge: Mapping[str, Any] | None = None,
          truth: Mapping[str, Any] | None = None) -> str:
    """Write the datasheet to `paths.datasheet` and return it. Counts come from the report's metrics (`run`: funnel,
    per-stage metrics); `final` is what the export holds."""
    funnel = {step: run["funnel"][step] for step in FUNNEL_STEPS} | {"final": len(exported)}
    if funnel["final"] > funnel["with_accepted_pair"]:
        raise ValueError(f"export holds {funnel['final']} pairs but only {funnel['with_accepted_pair']} were accepted")
    subjects = altered_subjects(counterfactuals, exported)
    by_stage = {stage: run["stages"][stage] for stage in steps()}  # DAG order (the JSON is key-sorted)
    sheet = render_datasheet(Sources(funnel, by_stage, params.model_dump(mode="json"), models, model_licenses(params),
                                     subjects, human_share(subjects, params.datasheet.human_words),
                                     date.today().isoformat(), params.datasheet, evaluation, validation,
                                     run.get("funnel_by_edit_type"), judge, truth))
    write_text(params.paths.datasheet, sheet)
    return sheet
