"""Tiny random text models (the demo profile's, the toy world's, the tests'), in the hub layout the real ids have.

A byte-level BPE vocabulary is trained on the given captions (so fills are caption words), then a RoBERTa-style
masked LM and a GPT-2-style causal LM with random weights are saved with their tokenizers. Same captions + seed give
byte-identical folders, so their fingerprints (and the shard cache keys built on them) are stable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch
from tokenizers import AddedToken, ByteLevelBPETokenizer
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPT2TokenizerFast,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaTokenizerFast,
)

SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
WIDTH, LAYERS, HEADS = 32, 2, 2


class TextParams(Protocol):
    """What `build` reads of a params section (the demo's `TinyModelsParams` is one)."""

    @property
    def seed(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def max_length(self) -> int: ...


def train_vocab(captions: list[str], out: Path, vocab_size: int) -> tuple[str, str]:
    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(captions, vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIAL_TOKENS,
                                  show_progress=False)
    out.mkdir(parents=True, exist_ok=True)
    vocab, merges = tokenizer.save_model(str(out))
    return vocab, merges


def masked_lm(vocab: str, merges: str, out: Path, max_length: int, vocab_size: int = 0,
              dtype: torch.dtype = torch.float32, **shape) -> None:
    """A random RoBERTa-style masked LM and its tokenizer in `out`. Like roberta-base, the mask token swallows the
    space before it, so fills are word-start (Ġ) tokens. A `vocab_size` above the tokenizer's pads the vocabulary
    (a published size) with ids the LM head never proposes (-1e4 bias)."""
    tokenizer = RobertaTokenizerFast(vocab=vocab, merges=merges, model_max_length=max_length,
                                     mask_token=AddedToken("<mask>", lstrip=True, rstrip=False))
    model = RobertaForMaskedLM(RobertaConfig(
        vocab_size=max(len(tokenizer), vocab_size), max_position_embeddings=max_length + 2, type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        **shape))
    with torch.no_grad():
        model.lm_head.bias[len(tokenizer):] = -1e4
    model.to(dtype).save_pretrained(out)
    tokenizer.save_pretrained(out)


def causal_lm(vocab: str, merges: str, out: Path, max_length: int, vocab_size: int = 0,
              dtype: torch.dtype = torch.float32, **shape) -> None:
    """A random GPT-2-style causal LM and its tokenizer in `out` (`vocab_size` as in `masked_lm`)."""
    tokenizer = GPT2TokenizerFast(vocab=vocab, merges=merges, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="<pad>", model_max_length=max_length)
    GPT2LMHeadModel(GPT2Config(
        vocab_size=max(len(tokenizer), vocab_size), n_positions=max_length, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, **shape)).to(dtype).save_pretrained(out)
    tokenizer.save_pretrained(out)


def build(captions: list[str], out: Path, params: TextParams) -> dict[str, Path]:
    """Write `out/mlm` and `out/clm`; returns their paths."""
    vocab, merges = train_vocab(captions, out / "vocab", params.vocab_size)
    paths = {"mlm": out / "mlm", "clm": out / "clm"}
    torch.manual_seed(params.seed)
    masked_lm(vocab, merges, paths["mlm"], params.max_length, hidden_size=WIDTH, num_hidden_layers=LAYERS,
              num_attention_heads=HEADS, intermediate_size=2 * WIDTH)
    torch.manual_seed(params.seed + 1)
    causal_lm(vocab, merges, paths["clm"], params.max_length, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS)
    return paths
