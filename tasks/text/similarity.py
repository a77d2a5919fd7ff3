"""Similarity window: sentence-embedding cosine between C_o and each candidate; keep `lower < sim <= upper` (the upper
bound of the candidate's edit type, `SimilarityParams.window`).

Output: the candidate rows that pass, plus `similarity`. Each unique sentence (originals too) is embedded once.
"""

from __future__ import annotations

import polars as pl
import torch
from sentence_transformers import SentenceTransformer

from tasks.core import schemas
from tasks.core.batches import invariant_map
from tasks.core.loading import hub_kwargs, load_once, resolve_device
from tasks.core.specs import ModelSpec
from tasks.text.params import SimilarityParams

SCHEMA, REJECTS_SCHEMA = schemas.SIMILARITY, schemas.rejects(schemas.SIMILARITY)


@load_once
def load_encoder(spec: ModelSpec) -> SentenceTransformer:
    return SentenceTransformer(spec.local(), device=str(resolve_device(spec)), **hub_kwargs(spec)).eval()


def load_models(params: SimilarityParams) -> SentenceTransformer:
    return load_encoder(params.model)


def window_reason(similarity: float, lower: float, upper: float) -> str | None:
    """The window is `(lower, upper]`: lower exclusive, upper inclusive."""
    if similarity <= lower:
        return "below_window"
    if similarity > upper:
        return "above_window"
    return None


def cosine(encoder: SentenceTransformer, pairs: list[tuple[str, str]], batch_size: int) -> list[float]:
    """cos(E(a), E(b)) per pair; every distinct sentence is embedded once, the same in any batch (`invariant_map`:
    batches of one token count, unpadded)."""
    if not pairs:
        return []
    sentences = sorted({s for pair in pairs for s in pair})
    lengths = [len(ids) for ids in encoder.tokenizer(sentences)["input_ids"]]
    rows = invariant_map(lambda batch: encoder.encode(batch, batch_size=len(batch), convert_to_tensor=True,
                                                      normalize_embeddings=True), sentences, batch_size, lengths)
    emb = torch.stack(rows)
    index = {s: i for i, s in enumerate(sentences)}
    a = emb[[index[x] for x, _ in pairs]].float()
    b = emb[[index[y] for _, y in pairs]].float()
    return (a * b).sum(-1).tolist()


def run(frame: pl.DataFrame, params: SimilarityParams, encoder: SentenceTransformer):
    """(passing candidates + similarity, rejects) for a `candidates` frame."""
    unique = sorted(set(frame["caption"]) | set(frame["candidate"]))
    length = dict(zip(unique, map(len, encoder.tokenizer(unique)["input_ids"])))
    fits = pl.Series([max(length[c], length[d]) <= encoder.max_seq_length
                      for c, d in zip(frame["caption"], frame["candidate"])], dtype=pl.Boolean)
    scored = frame.filter(fits)
    sims = cosine(encoder, list(zip(scored["caption"], scored["candidate"])), params.batch_size)
    scored = scored.with_columns(similarity=pl.Series(sims, dtype=pl.Float64))
    reasons = [window_reason(s, *params.window(t)) for s, t in zip(sims, scored["edit_type"])]
    scored = scored.with_columns(reason=pl.Series(reasons, dtype=pl.String), stage=pl.lit("similarity"))
    too_long = frame.filter(~fits).with_columns(
        similarity=pl.lit(None, pl.Float64), stage=pl.lit("similarity"), reason=pl.lit("too_long_for_similarity"))
    failed = scored.filter(pl.col("reason").is_not_null())
    rejects = pl.concat([f.select(list(REJECTS_SCHEMA)) for f in (failed, too_long)])
    return scored.filter(pl.col("reason").is_null()).select(list(SCHEMA)), rejects
