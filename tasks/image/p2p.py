"""Prompt-to-Prompt attention sharing for a paired UNet batch, as an attention processor + a controller.

Batch contract: UNet rows come in adjacent (o, c) pairs, the o row conditioned on C_o and the c row on C_c; for S
samples under classifier-free guidance the 4S rows are `[uncond·C_o, uncond·C_c, cond·C_o, cond·C_c]` per sample,
so row pair j belongs to sample j // 2. While a pair shares, its c row attends with the o row's map:
`out_c = softmax(q_o k_oᵀ / √d) v_c = SDPA(q_o, k_o, v_c)`, no map materialised; o rows are never changed.

Maps are shared in self-attention layers (attn1) only, as the paper does after InstructPix2Pix; cross-attention
layers always run as stock, so C_c's tokens steer the c row whatever their count. A sample shares at step i
(0-based) of T iff `i < p2p_fraction · T`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from diffusers.models.attention_processor import Attention

GUIDANCE_ROW_PAIRS = 2  # (uncond·C_o, uncond·C_c) and (cond·C_o, cond·C_c)


class AttentionController:
    """Shared state of all processors of one UNet: which row pairs share maps in the next UNet call.

    `begin(fractions, steps, device)` per batch, `step(i)` before each UNet call, `reset()` after the batch (then
    nothing is shared: the UNet behaves as stock). Each sample has GUIDANCE_ROW_PAIRS (o, c) row pairs per call.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.fractions: Sequence[float] = ()
        self.steps = 0
        self.device = torch.device("cpu")
        self.shared: torch.Tensor | None = None

    def begin(self, fractions: Sequence[float], steps: int, device: torch.device = torch.device("cpu")) -> None:
        """`fractions[s]` is sample s's p2p fraction, `steps` the number of denoising steps of the batch, `device`
        the UNet's."""
        self.reset()
        self.fractions, self.steps, self.device = tuple(fractions), steps, device

    def active(self, step: int) -> list[bool]:
        """Per sample: does it share maps at `step`?"""
        return [step < p * self.steps for p in self.fractions]

    def step(self, step: int) -> None:
        """Decided on the host once per UNet call, so layers branch on a Python value (no device sync, and one
        `torch.compile` graph per case)."""
        active = self.active(step)
        self.shared = torch.tensor(active, device=self.device).repeat_interleave(GUIDANCE_ROW_PAIRS) if any(
            active) else None

    def sharing(self, cross: bool) -> torch.Tensor | None:
        """Bool per row pair for a self-attention layer, or None when the layer runs as stock."""
        return None if cross else self.shared


def share_maps(query: torch.Tensor, key: torch.Tensor, shared: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(query, key) with each shared pair's c row replaced by its o row; rows are (o, c) pairs on dim 0."""
    mask = shared.view(-1, *([1] * (query.ndim - 1)))

    def swap(x: torch.Tensor) -> torch.Tensor:
        x = x.unflatten(0, (-1, 2))
        return torch.stack([x[:, 0], torch.where(mask, x[:, 0], x[:, 1])], 1).flatten(0, 1)

    return swap(query), swap(key)


class P2PAttnProcessor:
    """`AttnProcessor2_0` plus map sharing as directed by `controller` (no attention or encoder masks)."""

    def __init__(self, controller: AttentionController) -> None:
        self.controller = controller

    def __call__(self, attn: Attention, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, temb: torch.Tensor | None = None) -> torch.Tensor:
        if (attention_mask is not None or hidden_states.ndim != 3 or attn.spatial_norm is not None
                or attn.group_norm is not None):
            raise ValueError("P2PAttnProcessor supports plain SD attention layers only")
        residual = hidden_states
        batch, _, _ = hidden_states.shape
        cross = encoder_hidden_states is not None
        context = hidden_states if not cross else (
            attn.norm_encoder_hidden_states(encoder_hidden_states) if attn.norm_cross else encoder_hidden_states)
        heads = attn.heads
        query, key, value = attn.to_q(hidden_states), attn.to_k(context), attn.to_v(context)
        head_dim = key.shape[-1] // heads
        query, key, value = (x.view(batch, -1, heads, head_dim).transpose(1, 2) for x in (query, key, value))
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)
        shared = self.controller.sharing(cross)
        if shared is not None:
            query, key = share_maps(query, key, shared)
        out = F.scaled_dot_product_attention(query, key, value, dropout_p=0.0, is_causal=False)
        out = out.transpose(1, 2).reshape(batch, -1, heads * head_dim).to(query.dtype)
        out = attn.to_out[1](attn.to_out[0](out))
        if attn.residual_connection:
            out = out + residual
        return out / attn.rescale_output_factor


def install(unet: torch.nn.Module) -> AttentionController:
    """Give every attention layer of `unet` a `P2PAttnProcessor` sharing one new controller; returns it."""
    controller = AttentionController()
    unet.set_attn_processor(P2PAttnProcessor(controller))
    return controller
