"""Perplexity ranking: causal-LM perplexity of each surviving candidate; the lowest per caption becomes C_c.

perplexity(x) = exp(mean_{i>=1} -log p(x_i | x_<i)) over the candidate's own tokens: no BOS is added and the first
token is not scored. A caption's candidates differ from it in one word, so they share token prefixes: packed as one
token trie per caption, each shared prefix is computed once (equal to the per-candidate computation within float
rounding). Ties break on (position, substitute). With several edit types, only the candidates of the type drawn
for the caption (`drawn_type`, weighted by `type_shares`) are scored. Output `counterfactual_captions(caption_id,
image_id, caption, counterfactual, edit_type, position, start, end, original_word, substitute, mlm_score, similarity,
perplexity)`: one row per caption that had a survivor; every other candidate is a reject (`outranked`,
`edit_type_not_drawn`, `too_long_for_perplexity`, `too_short_for_perplexity`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase
from transformers.activations import GELUTanh, NewGELUActivation

from tasks.core import schemas
from tasks.core.batches import invariant_map
from tasks.core.edits import EDIT_TYPES, EditType
from tasks.core.loading import load_pretrained
from tasks.text.params import PerplexityParams

if TYPE_CHECKING:
    from transformers import PreTrainedModel

SCHEMA, REJECTS_SCHEMA = schemas.COUNTERFACTUALS, schemas.COUNTERFACTUALS_REJECTS


@dataclass(frozen=True)
class CausalLM:
    tokenizer: PreTrainedTokenizerBase
    model: PreTrainedModel

    @property
    def max_length(self) -> int:
        return min(self.tokenizer.model_max_length, self.model.config.max_position_embeddings)


def load_models(params: PerplexityParams) -> CausalLM:
    lm = CausalLM(*load_pretrained(params.model, AutoModelForCausalLM))
    fuse_tanh_gelu(lm.model)
    return lm


def fuse_tanh_gelu(model: torch.nn.Module) -> None:
    """GPT-2's `NewGELUActivation` (the tanh GELU as seven tensor ops) -> `GELUTanh`, the same function as one fused
    kernel: ~5% of gpt2-large's CPU time, equal within float rounding."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is NewGELUActivation:
                setattr(module, name, GELUTanh())


def token_ids(lm: CausalLM, texts: list[str]) -> list[list[int]]:
    return lm.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []


@dataclass
class Trie:
    """Token trie of one group of sequences. Node j is one token at `depths[j]` (0 for a first token) whose parent
    `parents[j]` (-1: none) comes before it, so a sequence is the path to the node it ends on and every distinct
    prefix of the group is one node."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    _children: dict[tuple[int, int], int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, ids: list[int]) -> int:
        """Insert a sequence; its end node."""
        node = -1
        for token in ids:
            child = self._children.get((node, token))
            if child is None:
                child = self._children[node, token] = len(self.tokens)
                self.tokens.append(token)
                self.parents.append(node)
                self.depths.append(self.depths[node] + 1 if node >= 0 else 0)
            node = child
        return node


def layout(row: list[Trie]) -> tuple[list[list[int]], int]:
    """Each node's slot in its packed row, per trie, and the number of inner nodes: every trie's inner nodes (those
    with children) come first and the leaves after them, so the logits a row needs (leaves predict nothing) are its
    first slots. Slot order is free: who attends to whom is the mask's business, positions are the depths."""
    inner = [set(trie.parents) for trie in row]
    order = [(k, j) for leaves in (False, True) for k, trie in enumerate(row) for j in range(len(trie))
             if (j not in inner[k]) == leaves]
    slots = [[0] * len(trie) for trie in row]
    for slot, (k, j) in enumerate(order):
        slots[k][j] = slot
    return slots, sum(len(nodes - {-1}) for nodes in inner)


@torch.inference_mode()
def path_nll(lm: CausalLM, rows: list[list[Trie]]) -> list[list[float]]:
    """For each trie of each row (in row order), each node's summed NLL along its path (its first token is not
    scored), from ONE forward pass: a node attends to its ancestors and itself (position = depth), so the keys and
    values of a shared prefix are computed once and reused by every continuation; logits only at inner nodes."""
    width = max(sum(map(len, row)) for row in rows)
    layouts = [layout(row) for row in rows]
    ids, positions, parents = np.zeros((3, len(rows), width), dtype=np.int64)
    sees = np.broadcast_to(np.eye(width, dtype=bool), (len(rows), width, width)).copy()
    for r, (row, (slots, _)) in enumerate(zip(rows, layouts)):
        for trie, at in zip(row, slots):
            ids[r, at], positions[r, at] = trie.tokens, trie.depths
            parents[r, at] = [at[p] if p >= 0 else 0 for p in trie.parents]
            for j, p in enumerate(trie.parents):
                if p >= 0:
                    sees[r, at[j]] |= sees[r, at[p]]
    device, dtype = lm.model.device, lm.model.dtype
    mask = torch.zeros(sees.shape, dtype=dtype).masked_fill_(~torch.from_numpy(sees), torch.finfo(dtype).min)
    ids_t, parents_t = torch.from_numpy(ids).to(device), torch.from_numpy(parents).to(device)
    keep = torch.arange(max(n for _, n in layouts), device=device)
    logits = lm.model(input_ids=ids_t, position_ids=torch.from_numpy(positions).to(device),
                      attention_mask=mask[:, None].to(device), logits_to_keep=keep).logits.float()
    row_t = torch.arange(len(rows), device=device)[:, None]
    edge = (logits.logsumexp(-1)[row_t, parents_t] - logits[row_t, parents_t, ids_t]).tolist()
    out = []
    for row, (slots, _), row_edge in zip(rows, layouts, edge):
        for trie, at in zip(row, slots):
            total: list[float] = []
            for j, p in enumerate(trie.parents):
                total.append(total[p] + row_edge[at[j]] if p >= 0 else 0.0)
            out.append(total)
    return out


def perplexities(lm: CausalLM, ids: list[list[int]], groups: list[Hashable], batch_tokens: int) -> list[float]:
    """Perplexity of each token sequence (>= 2 tokens), the same in any batch. Sequences of one group share a trie,
    so a token prefix they share is computed once; an identical sequence anywhere is scored once. Each trie is a row
    of its own, batched with tries of its own size and inner nodes (`invariant_map`: no padding), about
    `batch_tokens` nodes per forward pass."""
    tries: dict[Hashable, Trie] = {}
    ends: dict[tuple[int, ...], tuple[Trie, int]] = {}
    for group, seq in zip(groups, ids):
        if tuple(seq) not in ends:
            trie = tries.setdefault(group, Trie())
            ends[tuple(seq)] = trie, trie.add(seq)
    by_size: dict[int, list[Trie]] = {}
    for trie in tries.values():
        by_size.setdefault(len(trie), []).append(trie)
    nll: dict[int, list[float]] = {}
    for size, same in by_size.items():
        inner = [len(set(trie.parents) - {-1}) for trie in same]
        found = invariant_map(lambda batch: path_nll(lm, [[trie] for trie in batch]), same,
                              max(1, batch_tokens // size), inner)
        nll.update(zip(map(id, same), found))
    return [math.exp(nll[id(trie)][end] / trie.depths[end]) for trie, end in map(ends.__getitem__, map(tuple, ids))]


def drawn_type(caption_id: str, types: set[str], shares: Mapping[EditType, float]) -> str:
    """The edit type of a caption's C_c: a draw with weights `shares` among `types`, fixed by the caption id."""
    u = int.from_bytes(hashlib.blake2b(caption_id.encode(), digest_size=8).digest(), "big") / 2 ** 64
    ordered = sorted(shares.keys() & types, key=list(EDIT_TYPES).index)
    weights = np.cumsum([shares[t] for t in ordered])
    return ordered[min(int(np.searchsorted(weights, u * weights[-1], side="right")), len(ordered) - 1)]


def run(similar: pl.DataFrame, params: PerplexityParams, lm: CausalLM) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(counterfactual_captions, rejects) for a `similarity` frame."""
    ids = token_ids(lm, similar["candidate"].to_list())
    reasons = ["too_long_for_perplexity" if len(x) > lm.max_length else "too_short_for_perplexity" if len(x) < 2
               else None for x in ids]
    available: dict[str, set[str]] = {}
    for caption_id, edit_type, reason in zip(similar["caption_id"], similar["edit_type"], reasons):
        if reason is None:
            available.setdefault(caption_id, set()).add(edit_type)
    drawn = {c: drawn_type(c, types, params.type_shares) for c, types in available.items()}
    reasons = [r or (None if drawn[c] == t else "edit_type_not_drawn")
               for c, t, r in zip(similar["caption_id"], similar["edit_type"], reasons)]
    fits = [r is None for r in reasons]
    groups = similar["caption_id"].to_list() if params.shared_prefix else range(len(ids))
    scores = iter(perplexities(lm, [x for x, ok in zip(ids, fits) if ok], [g for g, ok in zip(groups, fits) if ok],
                               params.batch_tokens))
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
