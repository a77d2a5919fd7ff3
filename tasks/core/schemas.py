"""Every stage's output and rejects schema, in one light module (polars only: reading a schema never imports torch).

Caption side: captions (ingest) -> sites -> candidates -> relations -> similarity -> counterfactual captions
(perplexity). Image side: samples (one screening-score row per generated sample) -> selected (one canonically rendered
(I_o, I_c) per accepted pair). Release: the exported dataset's rows. A rejects schema is its stage's row schema plus
`stage` and `reason` (pair-level image rejects: `sample` is null); ingest's rejects say where a record came from
instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import polars as pl

Schema = dict[str, pl.DataType | type[pl.DataType]]  # a class (pl.String) or an instance (pl.List(...))

# What every stage output holds, whichever schema has the column: a row that breaks it is in no file a stage wrote.
REQUIRED = frozenset({  # never null
    "caption_id", "image_id", "caption", "counterfactual", "candidate", "edit_type", "position", "start", "end",
    "original_word", "substitute", "tag", "n_tokens", "sample", "seed", "p2p_fraction", "guidance_scale", "image_o",
    "image_c", "file_name", "width", "height", "category", "decision", "edited_caption", "fill", "image_0", "image_1",
    "id", "caption_0", "caption_1", "split"})
CHECKS = (  # (columns, holds on every row, in words); and `edit_type` names a declared type (`checks`)
    (("caption", "start", "end"), pl.col("start").is_between(0, pl.col("end"))
     & (pl.col("end") <= pl.col("caption").str.len_chars()), "0 <= start <= end <= len(caption)"),
    (("position",), pl.col("position") >= 0, "position >= 0"),
    (("position", "n_tokens"), pl.col("position") < pl.col("n_tokens"), "position < n_tokens"),
    (("sample", "seed"), (pl.col("sample") >= 0) & (pl.col("seed") >= 0), "sample, seed >= 0"),
    (("p2p_fraction",), pl.col("p2p_fraction").is_between(0, 1), "0 <= p2p_fraction <= 1"),
    (("guidance_scale",), pl.col("guidance_scale").is_finite(), "a finite guidance_scale"),
    (("width", "height"), (pl.col("width") > 0) & (pl.col("height") > 0), "width, height > 0"),
)


def checks(columns: Iterable[str]) -> Iterator[tuple[pl.Expr, str]]:
    """(holds on every row, in words) of each check over `columns` only; the edit types are imported for a frame
    with an `edit_type` column alone, so a stage writing none never runs their code."""
    columns = set(columns)
    if "edit_type" in columns:
        from tasks.core.edits import EDIT_TYPES

        yield pl.col("edit_type").is_in(list(EDIT_TYPES)), f"edit_type in {tuple(EDIT_TYPES)}"
    yield from ((rule, words) for needs, rule, words in CHECKS if set(needs) <= columns)


def rejects(schema: Schema) -> Schema:
    return {**schema, "stage": pl.String, "reason": pl.String}


CAPTIONS: Schema = {"caption_id": pl.String, "image_id": pl.String, "caption": pl.String}
CAPTIONS_REJECTS: Schema = {"file": pl.String, "line": pl.Int64, "caption_id": pl.String, "caption": pl.String,
                            "reason": pl.String}

SITES: Schema = {
    "caption_id": pl.String, "image_id": pl.String, "caption": pl.String, "edit_type": pl.String,
    "position": pl.Int64, "start": pl.Int64, "end": pl.Int64, "original_word": pl.String, "tag": pl.String,
    "n_tokens": pl.Int64,
}
SITES_REJECTS: Schema = {"caption_id": pl.String, "image_id": pl.String, "caption": pl.String, "reason": pl.String}

CANDIDATES: Schema = {
    "caption_id": pl.String, "image_id": pl.String, "caption": pl.String, "edit_type": pl.String, "tag": pl.String,
    "position": pl.Int64, "start": pl.Int64, "end": pl.Int64, "original_word": pl.String, "substitute": pl.String,
    "mlm_score": pl.Float64, "candidate": pl.String,
}
SIMILARITY: Schema = {**CANDIDATES, "similarity": pl.Float64}
COUNTERFACTUALS: Schema = {
    "caption_id": pl.String, "image_id": pl.String, "caption": pl.String, "counterfactual": pl.String,
    "edit_type": pl.String, "position": pl.Int64, "start": pl.Int64, "end": pl.Int64, "original_word": pl.String,
    "substitute": pl.String, "mlm_score": pl.Float64, "similarity": pl.Float64, "perplexity": pl.Float64,
}
COUNTERFACTUALS_REJECTS: Schema = rejects({**SIMILARITY, "perplexity": pl.Float64})

PAIR: Schema = {"caption_id": pl.String, "image_id": pl.String, "caption": pl.String, "counterfactual": pl.String,
                "edit_type": pl.String, "original_word": pl.String, "substitute": pl.String}
SCORE_COLUMNS = ("sim_text_image_o", "sim_text_image_c", "sim_image_image", "clip_dir")
SUBJECT_COLUMNS = ("subject_margin_o", "subject_margin_c")  # the both-subjects check; null for edits it skips
_SAMPLE: Schema = {"sample": pl.Int64, "seed": pl.Int64, "p2p_fraction": pl.Float64, "guidance_scale": pl.Float64,
                   **{name: pl.Float64 for name in (*SCORE_COLUMNS, *SUBJECT_COLUMNS)}}
_PROMPT_FLAGS: Schema = {"truncated_o": pl.Boolean, "truncated_c": pl.Boolean, "tokens_misaligned": pl.Boolean}
SAMPLES: Schema = {
    **PAIR, **_SAMPLE, "nan": pl.Boolean, "max_pixel_o": pl.Int64, "max_pixel_c": pl.Int64,
    "reject_reason": pl.String, **_PROMPT_FLAGS, "unet_evals": pl.Int64,
}
SAMPLES_REJECTS: Schema = rejects({**PAIR, "sample": pl.Int64, "seed": pl.Int64})
SELECTED: Schema = {**PAIR, **_SAMPLE, **_PROMPT_FLAGS, "tried": pl.Int64, "image_o": pl.String, "image_c": pl.String}
SELECTED_REJECTS: Schema = SAMPLES_REJECTS
PAIR_IMAGES: Schema = {c: SELECTED[c] for c in ("caption_id", "image_id", "caption", "counterfactual", "image_o",
                                                "image_c")}  # what a reader of the pairs' texts and images needs
VALIDATED: Schema = {"caption_id": pl.String}  # the human-validated pairs (the validation stage)

# The VLM judge (tasks/judge): P(Yes) of each yes/no question about a selected pair, then the verdict from the
# thresholds. A question's name says what it asks about which image: original_o = "does I_o show C_o's word?".
JUDGE_QUESTIONS = ("original_o", "substitute_c", "substitute_o", "original_c")  # expected: yes, yes, no, no
JUDGE_COLUMNS = tuple(f"judge_{q}" for q in JUDGE_QUESTIONS)
JUDGED: Schema = {"caption_id": pl.String, **dict.fromkeys(JUDGE_COLUMNS, pl.Float64), "judge_pass": pl.Boolean,
                  "judge_reason": pl.String, "people_pass": pl.Boolean}
# judge_reason: the first failed check (null when it passes); people_pass: both images labelled with their own
# caption by the Label Studio majority (null until both are labelled)
JUDGED_REJECTS: Schema = rejects({**PAIR, **dict.fromkeys(JUDGE_COLUMNS, pl.Float64)})

EXPORT: Schema = {  # the published COCO-Counterfactuals columns (I_o, I_c, C_o, C_c), then provenance
    "id": pl.String, "image_0": pl.String, "image_1": pl.String, "caption_0": pl.String, "caption_1": pl.String,
    "image_id": pl.String, "edit_type": pl.String, "original_word": pl.String, "substitute": pl.String,
    "position": pl.Int64, "mlm_score": pl.Float64, "similarity": pl.Float64, "perplexity": pl.Float64,
    "sim_text_image_o": pl.Float64, "sim_text_image_c": pl.Float64, "sim_image_image": pl.Float64,
    "clip_dir": pl.Float64, "subject_margin_o": pl.Float64, "subject_margin_c": pl.Float64, "seed": pl.Int64,
    "p2p_fraction": pl.Float64, "guidance_scale": pl.Float64, **{c: JUDGED[c] for c in (*JUDGE_COLUMNS, "judge_pass")},
}

ITM_DELTAS = ("delta_img_r", "delta_txt_r", "delta_img_c", "delta_txt_c")  # paper Fig. 3, in its order
EVALUATION: Schema = {"caption_id": pl.String, "model": pl.String, **dict.fromkeys(ITM_DELTAS, pl.Float64)}

# Object removal (tasks/removal): a decision per (image, class c_r) -> its caption edits -> the filled image ->
# the CLIP-checked pairs. `removed` / `remaining` are COCO class names; `boxes` are the removed classes' [x, y, w, h].
REMOVAL_MASKS: Schema = {
    "image_id": pl.String, "file_name": pl.String, "width": pl.Int64, "height": pl.Int64, "category": pl.String,
    "decision": pl.String, "removed": pl.List(pl.String), "remaining": pl.List(pl.String),
    "boxes": pl.List(pl.List(pl.Float64)), "area_share": pl.Float64,
}
REMOVAL_MASKS_REJECTS: Schema = {"image_id": pl.String, "file_name": pl.String, "category": pl.String,
                                 "stage": pl.String, "reason": pl.String}
REMOVAL_CAPTIONS: Schema = {**REMOVAL_MASKS, "caption_id": pl.String, "caption": pl.String,
                            "edited_caption": pl.String, "deleted": pl.List(pl.String)}
REMOVAL_CAPTIONS_REJECTS: Schema = {"image_id": pl.String, "category": pl.String, "caption_id": pl.String,
                                    "caption": pl.String, "stage": pl.String, "reason": pl.String}
REMOVAL_GALLERY: Schema = {"caption_id": pl.String, "image_id": pl.String, "caption": pl.String,
                           "classes": pl.List(pl.String)}
INPAINTED: Schema = {**REMOVAL_CAPTIONS, "fill": pl.String, "image_0": pl.String, "image_1": pl.String}
INPAINTED_REJECTS: Schema = rejects({"image_id": pl.String, "file_name": pl.String, "category": pl.String})
REMOVAL_PAIRS: Schema = {**INPAINTED, "clip_drop": pl.Float64, "sim_text_image_1": pl.Float64, "split": pl.String}
REMOVAL_SPLITS = ("train", "validation", "test")  # the values of REMOVAL_PAIRS' `split`
REMOVAL_PAIRS_REJECTS: Schema = rejects({"image_id": pl.String, "category": pl.String, "caption_id": pl.String})
REMOVAL_EXPORT: Schema = {  # the export columns (I_0, I_1, C_0, C_1 = real, edited), then provenance
    "id": pl.String, "image_0": pl.String, "image_1": pl.String, "caption_0": pl.String, "caption_1": pl.String,
    "image_id": pl.String, "removed": pl.List(pl.String), "remaining": pl.List(pl.String),
    "deleted": pl.List(pl.String), "decision": pl.String, "fill": pl.String, "clip_drop": pl.Float64,
    "sim_text_image_1": pl.Float64, "split": pl.String,
}


# The toy world's truth (tasks/toyworld/truth): what the checker reads in each image of a pair. `o_shows_c`: I_o shows
# C_c (then the pair does not show its edit); `reason_o`: why I_o does not show C_o (null when it does).
TRUTH_PARTS = ("o_shows_o", "c_shows_c", "o_shows_c", "c_shows_o")
TRUTH: Schema = {"caption_id": pl.String, "sample": pl.Int64, "edit_type": pl.String, "caption": pl.String,
                 "counterfactual": pl.String, **dict.fromkeys(TRUTH_PARTS, pl.Boolean),
                 "reason_o": pl.String, "reason_c": pl.String, "accurate": pl.Boolean, "minimal": pl.Boolean}
TRUTH_SAMPLES: Schema = {**TRUTH, "accurate_no_p2p": pl.Boolean, "minimal_no_p2p": pl.Boolean}
