"""Perplexity ranking: causal-LM perplexity of each surviving candidate; the lowest per caption becomes C_c.

perplexity(x) = exp(mean_{i>=1} -log p(x_i | x_<i)) over the candidate's own tokens: no BOS is added and the first
token is not scored. Ties break on (position, substitute). Output `counterfactual_captions(caption_id, image_id,
caption, counterfactual, position, start, end, original_word, substitute, mlm_score, similarity, perplexity)`:
one row per caption that had a survivor; every other candidate is a reject (`outranked`, `too_long_for_perplexity`,
`too_short_for_perplexity`).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase

from tasks import schemas
from tasks.models import load_pretrained
from tasks.params import PerplexityParams

SCHEMA, REJECTS_SCHEMA = schemas.COUNTERFACTUALS, schemas.COUNTERFACTUALS_REJECTS


@dataclass(frozen=True)
class CausalLM:
    tokenizer: PreTrainedTokenizerBase
    model: torch.nn.Module

    @property
    def max_length(self) -> int:
        return min(self.tokenizer.model_max_length, self.model.config.max_position_embeddings)


def load_models(params: PerplexityParams) -> CausalLM:
    return CausalLM(*load_pretrained(params.model, AutoModelForCausalLM))


def token_ids(lm: CausalLM, texts: list[str]) -> list[list[int]]:
    return lm.tokenizer(texts, add_special_tokens=False)["input_ids"]


@torch.inference_mode()
def perplexities(lm: CausalLM, ids: list[list[int]], batch_size: int) -> list[float]:
    """Perplexity of each token sequence (>= 2 tokens), batched by length with right padding + attention mask."""
    order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
    out = [float("nan")] * len(ids)
    device = lm.model.device
    for b in range(0, len(order), batch_size):
        batch = order[b:b + batch_size]
        width = max(len(ids[i]) for i in batch)
        input_ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for row, i in enumerate(batch):
            input_ids[row, :len(ids[i])] = torch.tensor(ids[i])
            mask[row, :len(ids[i])] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        logits = lm.model(input_ids=input_ids, attention_mask=mask).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), input_ids[:, 1:], reduction="none")
        scored = mask[:, 1:].float()
        mean_nll = (nll * scored).sum(1) / scored.sum(1)
        for row, i in enumerate(batch):
            out[i] = mean_nll[row].exp().item()
    return out


def run(similar: pl.DataFrame, params: PerplexityParams, lm: CausalLM) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(counterfactual_captions, rejects) for a `similarity` frame."""
    ids = token_ids(lm, similar["candidate"].to_list())
    reasons = ["too_long_for_perplexity" if len(x) > lm.max_length else "too_short_for_perplexity" if len(x) < 2
               else None for x in ids]
    fits = [r is None for r in reasons]
    scores = iter(perplexities(lm, [x for x, ok in zip(ids, fits) if ok], params.batch_size))
    scored = similar.with_columns(
        perplexity=pl.Series([next(scores) if ok else None for ok in fits], dtype=pl.Float64),
        reason=pl.Series(reasons, dtype=pl.String),
        stage=pl.lit("perplexity"),
    )
    ranked = scored.with_row_index("_row").filter(pl.col("reason").is_null()).sort(
        ["caption_id", "perplexity", "position", "substitute"], maintain_order=True)
    best = ranked.unique("caption_id", keep="first", maintain_order=True)
    outranked = ranked.join(best.select("_row"), on="_row", how="anti")
    rejects = pl.concat([f.select(list(REJECTS_SCHEMA)) for f in (
        scored.filter(pl.col("reason").is_not_null()), outranked.with_columns(reason=pl.lit("outranked")))])
    winners = best.rename({"candidate": "counterfactual"}).select(list(SCHEMA))
    order = similar.select("caption_id").unique(maintain_order=True).with_row_index("_order")
    winners = winners.join(order, on="caption_id").sort("_order").drop("_order")
    return winners, rejects
