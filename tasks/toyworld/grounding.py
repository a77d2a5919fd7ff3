"""Attention grounded in the world's masks (issue 63, R2; after TokenCompose, Wang et al., CVPR 2024): while the UNet
trains, its cross-attention maps (every level, every step) are tied to where each phrase's objects are.

For a caption's phrase p (its number, size, colour and every BPE piece of its noun: `parse.token_phrases`) and the
union mask M_p of its objects, downsampled to each attention level by area: a token loss `(1 - mass of the token's
map inside M_p)²` per phrase token, and a pixel BCE between the attention each pixel gives p's tokens together and
M_p. Both are 0 when every pixel of M_p attends to p's tokens only and every other pixel to none of them. Captions
dropped for classifier-free guidance (no phrase tokens) are not supervised. The maps are captured by `Recorder`, a
cross-attention processor computing the same attention as diffusers' (q·k·v from `p2p.projections`, the map
materialised so that its gradient flows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from diffusers.models.attention_processor import Attention, AttnProcessor2_0

from tasks.image.p2p import projections
from tasks.toyworld import world
from tasks.toyworld.batches import captioned, clip_ids
from tasks.toyworld.parse import token_phrases

if TYPE_CHECKING:
    from diffusers import UNet2DConditionModel

PHRASES = 2  # a caption's phrases at most
EPS = 1e-6


def targets(caption: str, scene: tuple[world.Obj, ...], size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(77,) phrase index per token (-1: none; all -1 for a dropped caption) and (PHRASES, size, size) the share of
    each pixel its phrase's objects cover (the union mask, averaged down from 4× `size`)."""
    if not caption:
        return torch.full((77,), -1), torch.zeros(PHRASES, size, size)
    spec = world.parse(caption)
    assert spec is not None  # a world caption
    masks, start = torch.zeros(PHRASES, 4 * size, 4 * size), 0
    for p, phrase in enumerate(spec.phrases):
        for obj in scene[start:start + phrase.count]:
            masks[p] = masks[p].maximum(torch.from_numpy(world.mask(obj, 4 * size)).float())
        start += phrase.count
    return torch.tensor(token_phrases(caption)), F.avg_pool2d(masks, 4)


def batch(rng, n: int) -> tuple[torch.Tensor, ...]:
    """`batches.diffusion_batch`'s images and token ids (the same draws), then each caption's `targets` at the latent
    side: phrase per token (n, 77) and phrase masks (n, PHRASES, 16, 16)."""
    images, texts, scenes = captioned(rng, n)
    phrases, masks = zip(*(targets(text, scene, images.shape[-1] // 2) for text, scene in zip(texts, scenes)))
    return images, clip_ids(texts), torch.stack(phrases), torch.stack(masks)


class Recorder(AttnProcessor2_0):
    """A cross-attention processor that appends each call's head-averaged map (batch, pixels, tokens) to `maps`;
    self-attention runs as diffusers' own."""

    def __init__(self, maps: list[torch.Tensor]) -> None:
        super().__init__()
        self.maps = maps

    def __call__(self, attn: Attention, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, temb: torch.Tensor | None = None, *args, **kwargs):
        if encoder_hidden_states is None:
            return super().__call__(attn, hidden_states, None, attention_mask, temb, *args, **kwargs)
        batch, heads = hidden_states.shape[0], attn.heads
        query, key, value = projections(attn, hidden_states, encoder_hidden_states, True)
        query, key, value = (x.view(batch, -1, heads, x.shape[-1] // heads).transpose(1, 2)
                             for x in (query, key, value))
        probs = (query @ key.transpose(-1, -2) * attn.scale).softmax(-1)
        self.maps.append(probs.mean(1))
        out = (probs @ value).transpose(1, 2).reshape(batch, -1, heads * value.shape[-1])
        out = attn.to_out[1](attn.to_out[0](out))
        return (out + hidden_states if attn.residual_connection else out) / attn.rescale_output_factor


def record(unet: UNet2DConditionModel) -> list[torch.Tensor]:
    """Install `Recorder`s on `unet`'s attention layers; returns the list they fill (clear it after each step)."""
    maps: list[torch.Tensor] = []
    unet.set_attn_processor(Recorder(maps))
    return maps


def loss(maps: list[torch.Tensor], phrases: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """The mean over `maps` of the token loss plus the pixel BCE (0 with no supervised token)."""
    member = F.one_hot(phrases.clamp(min=0), PHRASES).float() * (phrases >= 0).unsqueeze(-1)  # (B, T, P)
    supervised, present = member.sum(-1), member.amax(1)  # (B, T), (B, P)
    if not supervised.any():
        return masks.new_zeros(())
    total = masks.new_zeros(())
    for probs in maps:  # (B, HW, T)
        side = int(probs.shape[1] ** 0.5)
        inside = F.adaptive_avg_pool2d(masks, side).flatten(2)  # (B, P, HW)
        mass = torch.einsum("bht,bph->btp", probs, inside) / probs.sum(1).unsqueeze(-1).clamp(min=EPS)
        token = ((1 - (mass * member).sum(-1)) ** 2 * supervised).sum() / supervised.sum()
        given = torch.einsum("bht,btp->bph", probs, member).clamp(EPS, 1 - EPS)
        pixel = (F.binary_cross_entropy(given, inside, reduction="none").mean(-1) * present).sum() / present.sum()
        total = total + token + pixel
    return total / len(maps)
