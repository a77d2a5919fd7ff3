"""Prompt-to-Prompt attention sharing for a paired UNet batch, as an attention processor + a per-step schedule.

Batch contract: UNet rows come in adjacent (o, c) pairs, the o row conditioned on C_o and the c row on C_c; for S
samples under classifier-free guidance the 4S rows are `[uncond·C_o, uncond·C_c, cond·C_o, cond·C_c]` per sample,
so row pair j belongs to sample j // 2. While a pair shares, its c row attends with the o row's map:
`out_c = softmax(q_o k_oᵀ / √d) v_c = SDPA(q_o, k_o, v_c)`, no map materialised; o rows are never changed.

Maps are shared in self-attention layers (attn1), as the paper does after InstructPix2Pix. Cross-attention layers
run as stock, so C_c's tokens steer the c row whatever their count, unless the backend passes `p2p_tokens` (SDXL
always, SD v1 under `generate.p2p_tokens`: Prompt-to-Prompt's word swap and refinement edits): then a shared pair's
c row attends with its own map whose columns of the tokens C_c shares with C_o (an alignment made once per caption
pair: `tokens`) are the o row's map at the aligned tokens, `out_c = P_c' v_c` (this map materialised: 77 columns);
an edited token keeps its own column. A sample shares at step i (0-based) of T iff `i < p2p_fraction · T`. The UNet
call of step i gets that step's mask as the `p2p_shared` cross-attention kwarg (`schedule`): a graph input, so a
compiled UNet (CUDA graphs included) replays one graph for every sharing step and one for every stock step; the
processors hold no state.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from diffusers.models.attention_processor import Attention

if TYPE_CHECKING:
    from diffusers import UNet2DConditionModel

GUIDANCE_ROW_PAIRS = 2  # (uncond·C_o, uncond·C_c) and (cond·C_o, cond·C_c)


def schedule(fractions: Sequence[float], steps: int, device: torch.device) -> list[torch.Tensor | None]:
    """Per step: bool per row pair (GUIDANCE_ROW_PAIRS per sample, `fractions[s]` being sample s's p2p fraction), or
    None when no sample shares (the UNet runs as stock). Decided on the host once per batch and sent to `device` in
    one copy: each step's mask is a view of it, so the render loop does no host work per step."""
    active = [[i < p * steps for p in fractions] for i in range(steps)]
    table = torch.tensor(active, device=device).repeat_interleave(GUIDANCE_ROW_PAIRS, dim=1)
    return [table[i] if any(row) else None for i, row in enumerate(active)]


def share_rows(x: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
    """`x` (queries, keys or values) with each shared pair's c row replaced by its o row; rows are (o, c) pairs on
    dim 0."""
    x = x.unflatten(0, (-1, 2))
    mask = shared.view(-1, *([1] * (x.ndim - 2)))
    return torch.stack([x[:, 0], torch.where(mask, x[:, 0], x[:, 1])], 1).flatten(0, 1)


def tokens(original: Sequence[int], counterfactual: Sequence[int], counts: tuple[int, int]) -> list[int]:
    """Per token position j of C_c (its ids, padded as the encoder reads them; `counts`: both captions' untruncated
    token counts, as the backend's `token_counts` gives them): the column of `[map_o | map_c]` its shared map takes,
    the o map's column of the aligned equal token of C_o among both captions' start and word tokens (difflib's
    longest matching blocks), else `len + j`, its own. The end token and the padding keep their own: they sum up the
    whole caption, and C_o's maps cover what C_c dropped (a deleted phrase's objects would stay). Both id lists have
    one length."""
    n_o, n_c = (min(n, len(original)) - 1 for n in counts)
    index = [len(original) + j for j in range(len(counterfactual))]
    matcher = difflib.SequenceMatcher(None, list(original[:n_o]), list(counterfactual[:n_c]), autojunk=False)
    for i, j, size in matcher.get_matching_blocks():
        index[j:j + size] = range(i, i + size)
    return index


def pair_columns(columns: torch.Tensor, n: int) -> torch.Tensor:
    """`share_tokens`' columns of `n` samples' row pairs: the unconditional pair's prompts are one prompt (every token
    its own o column), the conditional pair's `columns` (`tokens` of C_o and C_c)."""
    every = torch.arange(len(columns), device=columns.device)
    return torch.stack([every, columns]).repeat(n, 1)


def share_tokens(out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 shared: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """`out` (SDPA's) with each shared pair's c row recomputed from its softmax map whose columns `columns` (one
    `tokens` row per pair) picks from `[map_o | map_c]`, in float32; o rows are SDPA's, untouched."""
    probs = (query.float() @ key.float().transpose(-1, -2) * query.shape[-1] ** -0.5).softmax(-1).unflatten(0, (-1, 2))
    index = columns.view(columns.shape[0], 1, 1, -1).expand(-1, *probs.shape[2:4], -1)
    mixed = torch.cat([probs[:, 0], probs[:, 1]], -1).gather(-1, index)
    c_row = (mixed @ value.float().unflatten(0, (-1, 2))[:, 1]).to(out.dtype)
    out = out.unflatten(0, (-1, 2))
    return torch.stack([out[:, 0], torch.where(shared.view(-1, 1, 1, 1), c_row, out[:, 1])], 1).flatten(0, 1)


def projections(attn: Attention, hidden: torch.Tensor, context: torch.Tensor,
                cross: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v: one GEMM per fused projection once `fuse_qkv_projections` ran (q·k·v in self-attention, k·v in
    cross-attention), else one each; sharing happens after, so it is exact either way."""
    if not getattr(attn, "fused_projections", False):
        return attn.to_q(hidden), attn.to_k(context), attn.to_v(context)
    if cross:
        return attn.to_q(hidden), *attn.to_kv(context).chunk(2, dim=-1)
    return attn.to_qkv(hidden).chunk(3, dim=-1)


class P2PAttnProcessor:
    """`AttnProcessor2_0` (or its fused-projection form) plus map sharing in self-attention as `p2p_shared` directs,
    and in cross-attention over the shared tokens `p2p_tokens` names (`share_tokens`; None: stock) (no attention or
    encoder masks)."""

    def __call__(self, attn: Attention, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, temb: torch.Tensor | None = None,
                 p2p_shared: torch.Tensor | None = None, p2p_tokens: torch.Tensor | None = None) -> torch.Tensor:
        if (attention_mask is not None or hidden_states.ndim != 3 or attn.spatial_norm is not None
                or attn.group_norm is not None):
            raise ValueError("P2PAttnProcessor supports plain SD attention layers only")
        residual = hidden_states
        batch, _, _ = hidden_states.shape
        cross = encoder_hidden_states is not None
        context = hidden_states if encoder_hidden_states is None else (
            attn.norm_encoder_hidden_states(encoder_hidden_states) if attn.norm_cross else encoder_hidden_states)
        heads = attn.heads
        query, key, value = projections(attn, hidden_states, context, cross)
        head_dim = key.shape[-1] // heads
        query, key, value = (x.view(batch, -1, heads, head_dim).transpose(1, 2) for x in (query, key, value))
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)
        if p2p_shared is not None and not cross:
            query, key = (share_rows(x, p2p_shared) for x in (query, key))
        out = F.scaled_dot_product_attention(query, key, value, dropout_p=0.0, is_causal=False)
        if p2p_shared is not None and cross and p2p_tokens is not None:
            out = share_tokens(out, query, key, value, p2p_shared, p2p_tokens)
        out = out.transpose(1, 2).reshape(batch, -1, heads * head_dim).to(query.dtype)
        out = attn.to_out[1](attn.to_out[0](out))
        if attn.residual_connection:
            out = out + residual
        return out / attn.rescale_output_factor


def install(unet: UNet2DConditionModel) -> None:
    """Fuse `unet`'s q·k·v projections and give every attention layer a `P2PAttnProcessor`."""
    unet.fuse_qkv_projections()
    unet.set_attn_processor(P2PAttnProcessor())
