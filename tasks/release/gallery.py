"""The pair gallery: a static, self-contained site under `reports/gallery/` to browse, filter and share the pairs.

What the site shows: a card per accepted pair (captions, edit spans, scores, images), per object-removal pair, and
per stage and reason a seeded sample of the rejects. Everything is sorted and rounded, so equal inputs give equal
bytes; its files are written and published by `gallery_site`.

A card carries the people's verdict (`validation`), the VLM judge's (`judge`, from `paths.judged` when that file
exists) and whether the two agree (`agreement`, only where the judge and people both judged the pair: the judged
row's `people_pass`), which the page filters on.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from itertools import groupby
from pathlib import Path

import polars as pl

from tasks.core.images import stored_files, stored_names
from tasks.core.io import plain, rejects_path
from tasks.core.schemas import JUDGE_COLUMNS, JUDGE_QUESTIONS, SCORE_COLUMNS, SUBJECT_COLUMNS, TRUTH_PARTS
from tasks.release.card import DEMO_NOTICE
from tasks.release.gallery_site import from_store, publish_image, publish_site
from tasks.stages import Params, steps

REJECT_SAMPLE = 20  # rejected rows shown per (stage, reason), seeded
SCORES = ("similarity", "perplexity", "mlm_score", *SCORE_COLUMNS, *SUBJECT_COLUMNS, "tried")
CAPTION_FIELDS = ("caption", "counterfactual", "caption_id", "edit_type", "original_word", "substitute")
REJECT_FIELDS = ("caption_id", "image_id", "caption", "candidate", "counterfactual", "edited_caption", "edit_type",
                 "original_word", "substitute", "category", "sample", *JUDGE_COLUMNS)
# stages the registry does not hold (the judge, object removal) -> the `paths` entry each writes, beside its rejects
OTHER_OUTPUTS = {"judge": "judged", "removal_masks": "removal_masks", "removal_captions": "removal_captions",
                   "removal_gallery": "removal_gallery", "inpaint": "inpainted", "removal_selection": "removal_pairs"}
_WORD = re.compile(r"[^\W_]+")


def edit_spans(text: str, other: str) -> list[list[int]]:
    """[start, end) of each run of words (letters and digits) `text` has in place of `other`: between their common
    first and last words, word by word where both hold as many (a swap: two runs), else one run. A run `text` lacks
    (what `other` inserted) is empty, at the start of the next word (after the last word at the end)."""
    words, others = list(_WORD.finditer(text)), _WORD.findall(other)
    ours = [w.group() for w in words]
    head = len(os.path.commonprefix([ours, others]))
    tail = len(os.path.commonprefix([ours[head:][::-1], others[head:][::-1]]))
    end, other_end = len(ours) - tail, len(others) - tail
    if head == end:
        at = words[head].start() if head < len(words) else words[-1].end() if words else 0
        return [[at, at]] if head < other_end else []
    same = end - head == other_end - head
    differ = [i for i in range(head, end) if not same or ours[i] != others[i]]
    runs = [[i for _, i in run] for _, run in groupby(enumerate(differ), key=lambda n_i: n_i[1] - n_i[0])]
    return [[words[run[0]].start(), words[run[-1]].end()] for run in runs]


def with_caption_scores(selected: pl.DataFrame, counterfactuals: pl.DataFrame) -> pl.DataFrame:
    """Selected pairs with their C_c's similarity, perplexity and masked-LM score, by caption_id."""
    return selected.join(counterfactuals.select("caption_id", "similarity", "perplexity", "mlm_score"),
                         on="caption_id", how="left").sort("caption_id")


def judgement(row: dict | None) -> dict | None:
    """A pair's row of the judge's output (`JUDGED`) as its verdict: pass, reason (null when it passes) and P(Yes)
    per question of `JUDGE_QUESTIONS`; None when it was not judged (no row, or a null verdict: the judge was off)."""
    if row is None or row["judge_pass"] is None:
        return None
    return {"pass": row["judge_pass"], "reason": row["judge_reason"],
            "p_yes": {question: row[f"judge_{question}"] for question in JUDGE_QUESTIONS}}


def agreement(row: dict | None) -> str | None:
    """"agree" or "disagree": does the judge's pass equal the people's? None unless both judged the pair."""
    if row is None or row["judge_pass"] is None or row["people_pass"] is None:
        return None
    return "agree" if row["judge_pass"] == row["people_pass"] else "disagree"


TRUTH_FIELDS = ("accurate", "minimal", *TRUTH_PARTS, "reason_o", "reason_c")


def pair_card(row: dict, read: Callable[[str], bytes], site: Path, validated: bool | None = None,
              judged: dict | None = None, truth: dict | None = None) -> dict:
    """A pair's card: captions, edit spans, scores, its images published into `site`, the people's verdict
    (`validated`, None: not labelled), the judge's (from its `judged` row, None: not judged), their agreement and the
    toy world's truth (`truth`: its `schemas.TRUTH` row; None: not checked)."""
    return plain({
        **{k: row[k] for k in CAPTION_FIELDS}, **{k: row[k] for k in SCORES},
        "spans_o": edit_spans(row["caption"], row["counterfactual"]),
        "spans_c": edit_spans(row["counterfactual"], row["caption"]),
        "image_o": publish_image(read, row["image_o"], site), "image_c": publish_image(read, row["image_c"], site),
        "validation": None if validated is None else "validated" if validated else "not validated",
        "judge": judgement(judged), "agreement": agreement(judged),
        "truth": None if truth is None else {k: truth[k] for k in TRUTH_FIELDS}})


def pair_cards(selected: pl.DataFrame, counterfactuals: pl.DataFrame, images: Path, site: Path,
               verdicts: dict[str, bool], judged: dict[str, dict], truths: dict[str, dict]) -> list[dict]:
    """One card per accepted pair, by caption_id. `verdicts`: caption_id -> validated by people (absent: not
    labelled); `judged`: caption_id -> its row of the judge's output (absent: not judged); `truths`: caption_id ->
    its toy-world truth row (absent: not checked)."""
    return [pair_card(row, from_store(images), site, verdicts.get(row["caption_id"]), judged.get(row["caption_id"]),
                      truths.get(row["caption_id"]))
            for row in with_caption_scores(selected, counterfactuals).iter_rows(named=True)]


def compare(site: Path, title: str, sides: dict[str, tuple[pl.DataFrame, pl.DataFrame, Callable[[str], bytes]]],
            changes: dict[str, str]) -> int:
    """A gallery of the pairs two versions do not share: per changed caption_id (by id), the card of each version
    that has it (`sides`: label -> (counterfactuals, selected, image reader)), labelled with the change, every image
    name of them checked (`stored_names`) before any is read. Returns the cards written."""
    rows = {label: {row["caption_id"]: row for row in with_caption_scores(
        selected.filter(pl.col("caption_id").is_in(list(changes))), counterfactuals).iter_rows(named=True)}
        for label, (counterfactuals, selected, _) in sides.items()}
    stored_names(row[key] for side in rows.values() for row in side.values() for key in ("image_o", "image_c"))
    cards = [{**pair_card(rows[label][caption_id], sides[label][2], site), "label": label, "change": change}
             for caption_id, change in sorted(changes.items()) for label in sides if caption_id in rows[label]]
    data = {"title": title, "tab": "pairs", "pairs": cards, "removal": [], "rejects": [], "funnel": {},
            "scores": list(SCORES)}
    publish_site(site, data, [])
    return len(cards)


def rejects_view(outputs: dict[str, Path], seed: int) -> list[dict]:
    """Per stage and reason: the count and a seeded sample of rejected rows (their caption fields)."""
    groups = []
    for stage, output in outputs.items():
        path = rejects_path(output)
        if not path.is_file():
            continue
        frame = pl.read_parquet(path)
        for (reason,), rows in sorted(frame.group_by("reason"), key=lambda g: str(g[0][0])):
            shown = rows.sample(min(REJECT_SAMPLE, rows.height), seed=seed) if rows.height else rows
            fields = [c for c in REJECT_FIELDS if c in shown.columns]
            groups.append({"stage": stage, "reason": reason, "count": rows.height,
                           "rows": [plain(r) for r in shown.select(fields).sort(fields[:1]).to_dicts()]})
    return groups


def removal_cards(pairs: pl.DataFrame, images: Path, site: Path) -> list[dict]:
    """One card per object-removal pair: I_0 | I_1, C_0 | C_1, the removed classes."""
    return [plain({"caption_id": r["caption_id"], "caption": r["caption"], "edited_caption": r["edited_caption"],
                     "spans_0": edit_spans(r["caption"], r["edited_caption"]),
                     "removed": r["removed"], "split": r["split"], "clip_drop": r["clip_drop"],
                     "image_0": publish_image(from_store(images), r["image_0"], site),
                     "image_1": publish_image(from_store(images), r["image_1"], site)})
            for r in pairs.sort("caption_id", "image_id").iter_rows(named=True)]


def people_verdicts(selected: pl.DataFrame, validated: Path) -> dict[str, bool]:
    """caption_id -> in the human-validated subset, for every selected pair; empty when `validated` is absent."""
    if not validated.is_file():
        return {}
    ids = set(pl.read_parquet(validated)["caption_id"])
    return {i: i in ids for i in selected["caption_id"]}


def rows_by_caption(frame: Path) -> dict[str, dict]:
    """caption_id -> its row of the judge's or the truth stage's output; empty when `frame` is absent (a gallery
    built before that stage ran)."""
    if not frame.is_file():
        return {}
    return {row["caption_id"]: row for row in pl.read_parquet(frame).iter_rows(named=True)}


def build(params: Params) -> dict:
    """Write the gallery of this run to `paths.gallery`; returns its counts."""
    paths, site = params.paths, Path(params.paths.gallery)
    selected = pl.read_parquet(paths.selected)
    removal = pl.read_parquet(paths.removal_pairs) if Path(paths.removal_pairs).is_file() else None
    stored_files(paths.selected_images, [*selected["image_o"], *selected["image_c"]])  # before any image is copied
    stored_files(paths.inpainted_images, [] if removal is None else [*removal["image_0"], *removal["image_1"]])
    data = {
        "pairs": pair_cards(selected, pl.read_parquet(paths.counterfactual_captions), Path(paths.selected_images),
                            site, people_verdicts(selected, Path(paths.validated)), rows_by_caption(Path(paths.judged)),
                            rows_by_caption(Path(paths.truth))),
        "removal": [] if removal is None else removal_cards(removal, Path(paths.inpainted_images), site),
        "rejects": rejects_view({name: Path(getattr(paths, stage.data)) for name, stage in steps().items()}
                                | {name: Path(getattr(paths, data)) for name, data in OTHER_OUTPUTS.items()},
                                params.gallery.seed),
        "funnel": json.loads(Path(paths.run_metrics).read_text())["funnel"] if Path(paths.run_metrics).is_file()
        else {},
        "scores": list(SCORES),
        "notice": re.sub(r"\*\*|`", "", DEMO_NOTICE) if params.profile == "demo" else "",
    }
    publish_site(site, data, sorted(Path(paths.figures).glob("*.png")))
    return {"pairs": len(data["pairs"]), "removal": len(data["removal"]),
            "rejects": sum(group["count"] for group in data["rejects"])}
