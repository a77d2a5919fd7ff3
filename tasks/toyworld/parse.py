"""Text-only pre-training of the diffusion model's text encoder: it learns to parse a world caption before the UNet
reads it (issue 63, R1b). Small linear heads on the per-token states (`last_hidden_state`, what cross-attention and
Prompt-to-Prompt read) predict, at every token of a phrase, that phrase's shape, colour, size, count, its index and
the caption's relation; at every other token but the first (the relation word, the full stop, the end and padding
tokens), the relation and both phrases' shapes and colours (`targets`). The heads are dropped afterwards: what stays
is a `CLIPTextModel` whose token states carry bound facts.

Invariants:
- `token_phrases(text)` names, per token position of `text` as the encoder reads it (77, BOS first, EOS-padded), the
  phrase the token belongs to (its number, size, colour and every BPE piece of its noun), else -1.
- `targets` draws nothing: a caption's labels are a function of its spec alone.
"""

from __future__ import annotations

import functools
import random

import torch
import torch.nn.functional as F

from tasks.toyworld import world
from tasks.toyworld.batches import clip_ids, clip_tokenizer

CONTEXT = 77
IGNORE = -100
UNSAID, ABSENT = "unsaid", "absent"
# Each fact the heads predict: its classes (UNSAID: the caption leaves it free; ABSENT: no second phrase/relation).
FACTS = {
    "shape": world.SHAPES, "colour": (*world.COLOURS, UNSAID), "size": (*world.SIZES, UNSAID), "count": (1, 2, 3),
    "phrase": (0, 1), "relation": (*world.RELATIONS, ABSENT),
    "shape_0": world.SHAPES, "colour_0": (*world.COLOURS, UNSAID),
    "shape_1": (*world.SHAPES, ABSENT), "colour_1": (*world.COLOURS, UNSAID, ABSENT),
}
PHRASE_FACTS = ("shape", "colour", "size", "count", "phrase", "relation")
SCENE_FACTS = ("relation", "shape_0", "colour_0", "shape_1", "colour_1")


@functools.lru_cache(maxsize=1 << 16)
def token_phrases(text: str) -> tuple[int, ...]:
    """Per token position (CONTEXT of them): the index of the phrase the token belongs to, -1 for the BOS, the
    relation word, the full stop and the EOS padding. `text` must be a world caption."""
    spec = world.parse(text)
    if spec is None:
        raise ValueError(f"{text!r} is no world caption")
    tokenizer, phrases, phrase = clip_tokenizer(), [-1], 0
    for word in text.rstrip(".").split():
        if word.lower() in world.RELATIONS:
            phrase = 1
            phrases.append(-1)
        else:
            phrases += [phrase] * len(tokenizer(word, add_special_tokens=False).input_ids)
    phrases += [-1] * (CONTEXT - len(phrases))
    return tuple(phrases[:CONTEXT])


def _index(fact: str, value) -> int:
    classes = FACTS[fact]
    return classes.index(UNSAID if value is None and UNSAID in classes else ABSENT if value is None else value)


@functools.lru_cache(maxsize=1 << 16)
def targets(spec: world.Spec) -> torch.Tensor:
    """(CONTEXT, len(FACTS)) class indices of `spec`'s caption's tokens, IGNORE where a fact is not asked there: at
    every token of a phrase `PHRASE_FACTS` (its own), at every later token but the phrases' (the relation word, the
    full stop, the end and padding tokens) `SCENE_FACTS`; the BOS is never asked. The encoder is causal, so a token
    cannot know what follows it (the number its noun, the first phrase the relation): for those facts the heads learn
    the world's odds, which bounds `train.json: parse_accuracy` below 1."""
    labels = torch.full((CONTEXT, len(FACTS)), IGNORE)
    first, second = spec.phrases[0], spec.phrases[1] if len(spec.phrases) > 1 else None
    scene = {"relation": spec.relation, "shape_0": first.shape, "colour_0": first.colour,
             "shape_1": second and second.shape, "colour_1": second and second.colour}
    column = {fact: i for i, fact in enumerate(FACTS)}
    for position, p in enumerate(token_phrases(world.caption(spec))):
        if p >= 0:
            phrase = spec.phrases[p]
            own = {"shape": phrase.shape, "colour": phrase.colour, "size": phrase.size, "count": phrase.count,
                   "phrase": p, "relation": spec.relation}
            for fact in PHRASE_FACTS:
                labels[position, column[fact]] = _index(fact, own[fact])
        elif position:
            for fact in SCENE_FACTS:
                labels[position, column[fact]] = _index(fact, scene[fact])
    return labels


def batch(rng: random.Random, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n captions' token ids and their `targets`."""
    specs = [world.sample(rng)[0] for _ in range(n)]
    return clip_ids([world.caption(s) for s in specs]), torch.stack([targets(s) for s in specs])


class Heads(torch.nn.Module):
    """One linear head per fact over the encoder's token states."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.heads = torch.nn.ModuleDict({fact: torch.nn.Linear(width, len(classes))
                                          for fact, classes in FACTS.items()})

    def losses(self, states: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The summed cross-entropy of every fact, and the share of asked facts predicted right."""
        loss, right, asked = states.new_zeros(()), 0, 0
        for i, head in enumerate(self.heads.values()):
            logits, target = head(states).flatten(0, 1), labels[..., i].flatten()
            if (mask := target != IGNORE).any():
                loss = loss + F.cross_entropy(logits[mask], target[mask])
                right += int((logits[mask].argmax(-1) == target[mask]).sum())
                asked += int(mask.sum())
        return loss, torch.tensor(right / max(asked, 1))
