"""Candidates: each edit site's rewrites of its span, by edit type (`tasks.core.edits`, its behaviours in
`tasks.text.edits.<type>`): a masked-LM type masks the site and keeps the top-k fills of a masked LM (the paper's
method) that keep the caption's token count (one more for an insert) and pass its `check_fill`; a rule type's
`rewrite` makes its rewrites, or gives the reason there are none.
Every rewrite is applied in one place (`edit`), which makes the articles it leaves agree (`quantities.agree`: `an old
hat` -> `a hat`, the article joining the edit), and every finished candidate is read whole (`caption_defect`): a new
a / an disagreement, a repeated word (also among one noun's modifiers: `a small green small triangle`), a count its
verb disagrees with or a noun with modifiers no one thing can be (two colours, two opposite sizes, a figure it is not:
`a small large red square`, `a square circle`; `contradictory_adjectives`) makes it a reject. Output
`candidates(caption_id, image_id, caption, edit_type, tag, position, start, end, original_word, substitute, mlm_score,
candidate)` (`mlm_score` null for rule-made rewrites).
Invariant (minimal edit): `candidate == caption[:start] + substitute + caption[end:]`, every other character
byte-identical; a swap's two words are its only change within the span, articles aside (`swaps.exchanged`). Every
rewrite that is dropped is a reject row with `stage='candidates'` and its `reason`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import polars as pl
import torch
from transformers import AutoModelForMaskedLM, BatchEncoding, PreTrainedTokenizerBase

from tasks.core import schemas
from tasks.core.batches import invariant_map
from tasks.core.edits import EDIT_TYPES
from tasks.core.loading import load_pretrained
from tasks.text import edits, grammar, tagging
from tasks.text.params import CandidatesParams
from tasks.text.quantities import agree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

SCHEMA, REJECTS_SCHEMA = schemas.CANDIDATES, schemas.rejects(schemas.CANDIDATES)
_SITE_COLUMNS = ("caption_id", "image_id", "caption", "edit_type", "tag", "position", "start", "end", "original_word")
# Word-start markers of byte-level BPE (RoBERTa, GPT-2) and SentencePiece vocabularies.
_WORD_START = ("Ġ", "▁")


@dataclass(frozen=True)
class MaskedLM:
    tokenizer: PreTrainedTokenizerBase
    model: PreTrainedModel

    @cached_property
    def marks_word_start(self) -> bool:
        """True for vocabularies that mark word starts (Ġ, ▁); False for WordPiece, which marks continuations."""
        first = self.tokenizer.convert_ids_to_tokens(self.tokenizer(" the", add_special_tokens=False)["input_ids"])[0]
        return first.startswith(_WORD_START)

    def is_word_start(self, token: str) -> bool:
        return token.startswith(_WORD_START) if self.marks_word_start else not token.startswith("##")

    @property
    def max_length(self) -> int:
        return min(self.tokenizer.model_max_length, self.model.config.max_position_embeddings - 2)

    def masked_logits(self, enc: BatchEncoding, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits at positions (rows, cols) only: the encoder runs on the whole batch, the MLM head
        (RoBERTa `lm_head`, BERT `cls`: a third of roberta-base's FLOPs over a caption) on the masks alone."""
        head = getattr(self.model, "lm_head", None) or getattr(self.model, "cls", None)
        if head is None:
            return self.model(**enc).logits[rows, cols]
        return head(self.model.base_model(**enc).last_hidden_state[rows, cols])


def load_models(params: CandidatesParams) -> MaskedLM:
    return MaskedLM(*load_pretrained(params.model, AutoModelForMaskedLM))


def fill_text(site: dict, fill: str) -> str:
    """What a masked-LM fill rewrites the site's span to (an inserted word brings its space)."""
    return fill + " " if EDIT_TYPES[site["edit_type"]].inserts else fill


def masked_caption(site: dict, mask_token: str) -> str:
    return site["caption"][:site["start"]] + fill_text(site, mask_token) + site["caption"][site["end"]:]


@torch.inference_mode()
def top_fills(mlm: MaskedLM, masked: list[str], lengths: list[int], top_k: int,
              batch_size: int) -> list[list[tuple[str, float]]]:
    """For each masked sentence (of `lengths` tokens), its top-k (token, probability) fills, best first, the same in
    any batch (`invariant_map`: batches of one length, unpadded); the MLM head runs at the masked positions only."""
    def forward(batch: list[str]) -> list[list[tuple[str, float]]]:
        enc = mlm.tokenizer(batch, return_tensors="pt").to(mlm.model.device)
        rows, cols = (enc["input_ids"] == mlm.tokenizer.mask_token_id).nonzero(as_tuple=True)
        logits = mlm.masked_logits(enc, rows, cols)
        k = min(top_k, logits.shape[-1])  # a k over the vocabulary's size: every token
        scores, ids = logits.float().softmax(-1).topk(k, dim=-1)
        return [list(zip(mlm.tokenizer.convert_ids_to_tokens(id_row), score_row))
                for id_row, score_row in zip(ids.tolist(), scores.tolist())]

    return invariant_map(forward, masked, batch_size, lengths)


def reject_reason(word_start: bool, fill: str, site: dict, params: CandidatesParams) -> str | None:
    """Why a masked-LM fill is not a candidate (checked in this order), or None when it is one."""
    if site["start"] > 0 and not word_start:
        return "subword"
    if not tagging.WORD.fullmatch(fill):
        return "not_a_word"
    if fill.casefold() == site["original_word"].casefold():
        return "same_word"
    edit_type = site["edit_type"]
    tokens = tagging.tokenize(edit(site, fill_text(site, fill))["candidate"])
    if len(tokens) != site["n_tokens"] + EDIT_TYPES[edit_type].inserts:
        return "token_count_changed"
    return edits.function(edit_type, "check_fill")(tagging.tag_tokens(tokens)[site["position"]], fill, site, params)


def caption_defect(row: dict, params: CandidatesParams) -> str | None:
    """Why a finished candidate row, however its rewrite was made, is no C_c (read on the whole caption, not the
    edited word): an a / an of the edit disagreeing with its next word that C_o's span did not have
    (`grammar.new_disagreements`), a word repeated right after itself or among one noun's modifiers (`a bicycle
    bicycle`, `grammar.repeats`), a recounted phrase its verb disagrees with (`two dogs chases`: a type's `rejects`), a
    noun given modifiers no one thing can be that C_o did not give it (`grammar.contradictions`: `a small large dog`,
    `a red blue car`, `a square circle`)."""
    caption, candidate = row["caption"], row["candidate"]
    if grammar.new_disagreements(row):
        return "article_disagreement"
    if grammar.repeats(candidate) > grammar.repeats(caption):
        return "repeated_word"
    if rejects := EDIT_TYPES[row["edit_type"]].rejects:
        found = edits.function(row["edit_type"], "defects")(row, params.quantity_nouns, params.numbers)
        if defect := next((d for d in rejects if found[d]), None):
            return defect
    if grammar.contradictions(candidate) > grammar.contradictions(caption):
        return "contradictory_adjectives"
    return None


def edit(site: dict, substitute: str) -> dict:
    """The site's span rewritten to `substitute`, the article before it agreeing (then part of the edit): `start`,
    `original_word`, `substitute` and `candidate`, with `candidate == caption[:start] + substitute + caption[end:]`."""
    caption = site["caption"]
    start, substitute = agree(caption, site["start"], site["end"], substitute)
    return {"start": start, "original_word": caption[start:site["end"]], "substitute": substitute,
            "candidate": caption[:start] + substitute + caption[site["end"]:]}


def _row(site: dict, substitute: str, mlm_score: float | None) -> dict:
    return {**{k: site[k] for k in _SITE_COLUMNS}, **edit(site, substitute), "mlm_score": mlm_score}


def masked_rewrites(sites: list[dict], params: CandidatesParams,
                    mlm: MaskedLM) -> list[tuple[list[dict], list[dict]]]:
    """(candidates, rejects) of each site of a masked-LM edit type."""
    masked = [masked_caption(site, mlm.tokenizer.mask_token) for site in sites]
    lengths = [len(ids) for ids in mlm.tokenizer(masked)["input_ids"]] if masked else []
    fits = [n <= mlm.max_length for n in lengths]
    fills = iter(top_fills(mlm, [m for m, ok in zip(masked, fits) if ok], [n for n, ok in zip(lengths, fits) if ok],
                           params.top_k, params.batch_size))
    out = []
    for site, ok in zip(sites, fits):
        kept, rejects, seen = [], [], set()
        if not ok:
            rejects.append({**{k: site[k] for k in _SITE_COLUMNS}, "stage": "candidates", "reason": "too_long_for_mlm"})
        for token, score in next(fills) if ok else ():
            fill = mlm.tokenizer.convert_tokens_to_string([token]).strip()
            row = _row(site, fill_text(site, fill), score)
            reason = "duplicate_fill" if fill in seen else reject_reason(mlm.is_word_start(token), fill, site, params)
            if reason is None:
                seen.add(fill)
                kept.append(row)
            else:
                rejects.append({**row, "stage": "candidates", "reason": reason})
        out.append((kept, rejects))
    return out


def rule_rewrites(site: dict, params: CandidatesParams) -> tuple[list[dict], list[dict]]:
    """(candidates, rejects) of a site of a rule-based edit type."""
    rewrites, reason = edits.function(site["edit_type"], "rewrite")(site, params)
    rejects = [] if reason is None else [{**{k: site[k] for k in _SITE_COLUMNS}, "stage": "candidates",
                                          "reason": reason}]
    return [_row(site, substitute, None) for substitute in rewrites], rejects


def run(sites: pl.DataFrame, params: CandidatesParams, mlm: MaskedLM) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(candidates, rejects) for a `sites` frame: each site's rows together, in its row order, so a frame cut into
    shards anywhere gives the same rows in the same order."""
    rows = list(sites.iter_rows(named=True))
    masked = iter(masked_rewrites([r for r in rows if EDIT_TYPES[r["edit_type"]].masked], params, mlm))
    kept, rejects = [], []
    for site in rows:
        found, refused = next(masked) if EDIT_TYPES[site["edit_type"]].masked else rule_rewrites(site, params)
        defects = [caption_defect(row, params) for row in found]
        kept += [row for row, reason in zip(found, defects) if reason is None]
        rejects += refused + [{**row, "stage": "candidates", "reason": reason}
                              for row, reason in zip(found, defects) if reason]
    return pl.DataFrame(kept, schema=SCHEMA), pl.DataFrame(rejects, schema=REJECTS_SCHEMA)
