"""MLM candidates: each noun site masked in its caption, top-k fills of a masked LM, filtered.

Output `candidates(caption_id, image_id, caption, position, start, end, original_word, substitute, mlm_score,
candidate)`. Invariant (minimal edit): `candidate == caption[:start] + substitute + caption[end:]`, every other
character byte-identical. Every fill that is dropped is a reject row with `stage='candidates'` and its `reason`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import polars as pl
import torch
from transformers import AutoModelForMaskedLM, BatchEncoding, PreTrainedTokenizerBase

from tasks.core import schemas
from tasks.core.loading import load_pretrained
from tasks.core.params import CandidatesParams
from tasks.text import nouns

SCHEMA, REJECTS_SCHEMA = schemas.CANDIDATES, schemas.rejects(schemas.CANDIDATES)
_WORD = re.compile(r"[^\W\d_]+(?:[-'][^\W\d_]+)*")
# Word-start markers of byte-level BPE (RoBERTa, GPT-2) and SentencePiece vocabularies.
_WORD_START = ("Ġ", "▁")


@dataclass(frozen=True)
class MaskedLM:
    tokenizer: PreTrainedTokenizerBase
    model: torch.nn.Module

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


def masked_caption(caption: str, start: int, end: int, mask_token: str) -> str:
    return caption[:start] + mask_token + caption[end:]


@torch.inference_mode()
def top_fills(mlm: MaskedLM, masked: list[str], lengths: list[int], top_k: int,
              batch_size: int) -> list[list[tuple[str, float]]]:
    """For each masked sentence (of `lengths` tokens), its top-k (token, probability) fills, best first. Batches are
    cut from the sentences sorted by length (little padding), and the MLM head runs at the masked positions only."""
    order = sorted(range(len(masked)), key=lengths.__getitem__)
    out: list[list[tuple[str, float]]] = [[] for _ in masked]
    for b in range(0, len(order), batch_size):
        batch = order[b:b + batch_size]
        enc = mlm.tokenizer([masked[i] for i in batch], padding=True, return_tensors="pt").to(mlm.model.device)
        rows, cols = (enc["input_ids"] == mlm.tokenizer.mask_token_id).nonzero(as_tuple=True)
        logits = mlm.masked_logits(enc, rows, cols)
        scores, ids = logits.float().softmax(-1).topk(top_k, dim=-1)
        for i, score_row, id_row in zip(rows.tolist(), scores.tolist(), ids.tolist()):
            out[batch[i]] = list(zip(mlm.tokenizer.convert_ids_to_tokens(id_row), score_row))
    return out


def reject_reason(word_start: bool, fill: str, site: dict, keep_tags: tuple[str, ...]) -> str | None:
    """Why a fill is not a candidate (checked in this order), or None when it is one."""
    if site["start"] > 0 and not word_start:
        return "subword"
    if not _WORD.fullmatch(fill):
        return "not_a_word"
    if fill.casefold() == site["original_word"].casefold():
        return "same_word"
    tokens = nouns.tokenize(site["caption"][:site["start"]] + fill + site["caption"][site["end"]:])
    if len(tokens) != site["n_tokens"]:
        return "token_count_changed"
    if nouns.tag_tokens(tokens)[site["position"]] not in keep_tags:
        return "not_a_noun"
    return None


def run(sites: pl.DataFrame, params: CandidatesParams, mlm: MaskedLM) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(candidates, rejects) for a `nouns` frame."""
    rows = list(sites.iter_rows(named=True))
    masked = [masked_caption(r["caption"], r["start"], r["end"], mlm.tokenizer.mask_token) for r in rows]
    lengths = [len(ids) for ids in mlm.tokenizer(masked)["input_ids"]] if masked else []
    fits = [n <= mlm.max_length for n in lengths]
    fills = top_fills(mlm, [m for m, ok in zip(masked, fits) if ok], [n for n, ok in zip(lengths, fits) if ok],
                      params.top_k, params.batch_size)
    fills_iter = iter(fills)
    kept, rejects = [], []
    for site, ok in zip(rows, fits):
        base = {k: site[k] for k in ("caption_id", "image_id", "caption", "position", "start", "end", "original_word")}
        if not ok:
            rejects.append({**base, "stage": "candidates", "reason": "too_long_for_mlm"})
            continue
        seen = set()
        for token, score in next(fills_iter):
            fill = mlm.tokenizer.convert_tokens_to_string([token]).strip()
            row = {**base, "substitute": fill, "mlm_score": score,
                   "candidate": site["caption"][:site["start"]] + fill + site["caption"][site["end"]:]}
            reason = "duplicate_fill" if fill in seen else reject_reason(
                mlm.is_word_start(token), fill, site, params.keep_tags)
            if reason is None:
                seen.add(fill)
                kept.append(row)
            else:
                rejects.append({**row, "stage": "candidates", "reason": reason})
    return pl.DataFrame(kept, schema=SCHEMA), pl.DataFrame(rejects, schema=REJECTS_SCHEMA)
