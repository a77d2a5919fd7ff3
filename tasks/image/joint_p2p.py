"""Attention sharing in joint (MM-DiT) attention, for flow-matching transformers (SD3), after Stable Flow (Avrahami et
al., "Stable Flow: Vital Layers for Training-Free Image Editing", CVPR 2025).

Rows obey `p2p`'s batch contract (adjacent (o, c) pairs; `p2p.schedule` gives the per-step `p2p_shared` mask, one
bool per pair). An MM-DiT block attends over `[image tokens | text tokens]` jointly, so there is no separate
self-attention map to share as in a UNet. Stable Flow edits by injecting the reference image's image-token features
into the edited generation in a few "vital" layers only, keeping the edit prompt's text tokens: injecting in every
layer pins the edited image to the reference, in none leaves them unrelated. We do the same in the blocks
`generate.p2p_layers` lists (None: every joint block; Stable Flow's vital layers are FLUX's, not SD3's, hence a
param): while a pair shares, its c row's image-token queries, keys and values are the o row's (the o image's
embeddings as the attention reads them), its text tokens' are C_c's own, so C_c still steers the c image through
the text columns and the c row's text stream. o rows are never changed; a listed block's second, image-only
attention (SD3.5's dual attention) shares the same way. The processors hold no state beyond their block's flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from diffusers.models.attention_processor import Attention

from tasks.image.p2p import share_rows

if TYPE_CHECKING:
    from diffusers import SD3Transformer2DModel


def heads(attn: Attention, x: torch.Tensor) -> torch.Tensor:
    return x.unflatten(-1, (attn.heads, -1)).transpose(1, 2)


class JointP2PProcessor:
    """`JointAttnProcessor2_0` plus, when `share` (a listed block) and `p2p_shared` is given, the c row of each
    sharing pair taking its o row's image-token q, k, v (no attention mask)."""

    def __init__(self, share: bool) -> None:
        self.share = share

    def __call__(self, attn: Attention, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None,
                 p2p_shared: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if attention_mask is not None:
            raise ValueError("JointP2PProcessor takes no attention mask")
        image_tokens = hidden_states.shape[1]
        query, key, value = (heads(attn, f(hidden_states)) for f in (attn.to_q, attn.to_k, attn.to_v))
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)
        if self.share and p2p_shared is not None:
            query, key, value = (share_rows(x, p2p_shared) for x in (query, key, value))
        if encoder_hidden_states is not None:
            text = [heads(attn, f(encoder_hidden_states)) for f in (attn.add_q_proj, attn.add_k_proj, attn.add_v_proj)]
            if attn.norm_added_q is not None:
                text[0] = attn.norm_added_q(text[0])
            if attn.norm_added_k is not None:
                text[1] = attn.norm_added_k(text[1])
            query, key, value = (torch.cat([x, y], dim=2) for x, y in zip((query, key, value), text))
        out = F.scaled_dot_product_attention(query, key, value, dropout_p=0.0, is_causal=False)
        out = out.transpose(1, 2).flatten(2).to(query.dtype)
        image = attn.to_out[1](attn.to_out[0](out[:, :image_tokens]))
        if encoder_hidden_states is None:
            return image
        text_out = out[:, image_tokens:]
        return image, text_out if attn.context_pre_only else attn.to_add_out(text_out)


def install(transformer: SD3Transformer2DModel, layers: Sequence[int] | None) -> None:
    """Give every attention layer of `transformer`'s joint blocks a `JointP2PProcessor`, sharing in the blocks
    `layers` lists (None: all)."""
    blocks = range(len(transformer.transformer_blocks))
    if layers is not None and not set(layers) <= set(blocks):
        raise ValueError(f"generate.p2p_layers {sorted(layers)} names blocks the transformer lacks "
                         f"(0..{len(blocks) - 1})")
    chosen = set(blocks if layers is None else layers)
    transformer.set_attn_processor({name: JointP2PProcessor(int(name.split(".")[1]) in chosen)
                                    for name in transformer.attn_processors})
