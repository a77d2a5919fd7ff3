"""Tiny random text models for the demo profile and the tests, saved in the hub layout the real ids have.

A byte-level BPE vocabulary is trained on the given captions (so fills are caption words), then a RoBERTa-style
masked LM and a GPT-2-style causal LM with random weights are saved with their tokenizers. Same captions + seed give
byte-identical folders, so their fingerprints (and the shard cache keys built on them) are stable.
"""

from __future__ import annotations

from pathlib import Path

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

from tasks.core.params import TinyModelsParams

SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
WIDTH, LAYERS, HEADS = 32, 2, 2


def train_vocab(captions: list[str], out: Path, vocab_size: int) -> tuple[str, str]:
    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(captions, vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIAL_TOKENS,
                                  show_progress=False)
    out.mkdir(parents=True, exist_ok=True)
    vocab, merges = tokenizer.save_model(str(out))
    return vocab, merges


def build(captions: list[str], out: Path, params: TinyModelsParams) -> dict[str, Path]:
    """Write `out/mlm` and `out/clm`; returns their paths."""
    vocab, merges = train_vocab(captions, out / "vocab", params.vocab_size)
    paths = {"mlm": out / "mlm", "clm": out / "clm"}

    # Like roberta-base: the mask token swallows the space before it, so fills are word-start (Ġ) tokens.
    mlm_tokenizer = RobertaTokenizerFast(vocab=vocab, merges=merges, model_max_length=params.max_length,
                                         mask_token=AddedToken("<mask>", lstrip=True, rstrip=False))
    torch.manual_seed(params.seed)
    mlm = RobertaForMaskedLM(RobertaConfig(
        vocab_size=len(mlm_tokenizer), hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=2 * WIDTH, max_position_embeddings=params.max_length + 2, type_vocab_size=1,
        pad_token_id=mlm_tokenizer.pad_token_id, bos_token_id=mlm_tokenizer.bos_token_id,
        eos_token_id=mlm_tokenizer.eos_token_id))
    mlm.save_pretrained(paths["mlm"])
    mlm_tokenizer.save_pretrained(paths["mlm"])

    clm_tokenizer = GPT2TokenizerFast(vocab=vocab, merges=merges, bos_token="<s>", eos_token="</s>",
                                      unk_token="<unk>", pad_token="<pad>", model_max_length=params.max_length)
    torch.manual_seed(params.seed + 1)
    clm = GPT2LMHeadModel(GPT2Config(
        vocab_size=len(clm_tokenizer), n_positions=params.max_length, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS,
        bos_token_id=clm_tokenizer.bos_token_id, eos_token_id=clm_tokenizer.eos_token_id))
    clm.save_pretrained(paths["clm"])
    clm_tokenizer.save_pretrained(paths["clm"])
    return paths
