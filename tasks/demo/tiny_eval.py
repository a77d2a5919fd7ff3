"""Tiny random Hugging Face image-text models for the demo's evaluate stage and the tests, in the hub layout: a
CLIP bi-encoder (`CLIPModel`) and the ViLT and BridgeTower cross-encoders (`*ForImageAndTextRetrieval`), each with
its processor. Same captions + seed give byte-identical folders."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import (
    BertTokenizerFast,
    BridgeTowerConfig,
    BridgeTowerForImageAndTextRetrieval,
    BridgeTowerImageProcessor,
    BridgeTowerProcessor,
    CLIPConfig,
    CLIPImageProcessor,
    CLIPModel,
    CLIPProcessor,
    RobertaTokenizerFast,
    ViltConfig,
    ViltForImageAndTextRetrieval,
    ViltImageProcessor,
    ViltProcessor,
)

from tasks.core.specs import ItmSpec
from tasks.tiny.images import TINY_IMAGE_SIZE, clip_bpe_tokenizer

WIDTH, TEXT_POSITIONS = 32, 40
_TINY = dict(hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=1, num_attention_heads=2)


def build_tiny_hf_clip(out_dir: Path, seed: int) -> ItmSpec:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = CLIPModel(CLIPConfig(
            text_config={**_TINY, "vocab_size": 49408, "max_position_embeddings": 77},
            vision_config={**_TINY, "image_size": TINY_IMAGE_SIZE, "patch_size": 8}, projection_dim=16))
    model.save_pretrained(out_dir)
    size = {"height": TINY_IMAGE_SIZE, "width": TINY_IMAGE_SIZE}
    CLIPProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": TINY_IMAGE_SIZE}, crop_size=size),
                  tokenizer=clip_bpe_tokenizer()).save_pretrained(out_dir)
    return ItmSpec(id=str(out_dir), model_class="CLIPModel")


def build_tiny_vilt(out_dir: Path, captions: list[str], seed: int) -> ItmSpec:
    """A word-level WordPiece vocabulary of the captions' lower-cased words; unknown words map to [UNK]."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    words = sorted({w for caption in captions for w in caption.lower().replace(".", " ").split()})
    vocab = out_dir / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(vocab), do_lower_case=True, model_max_length=TEXT_POSITIONS)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = ViltForImageAndTextRetrieval(ViltConfig(
            **_TINY, vocab_size=len(tokenizer), image_size=TINY_IMAGE_SIZE, patch_size=8,
            max_position_embeddings=TEXT_POSITIONS))
    model.save_pretrained(out_dir)
    ViltProcessor(image_processor=ViltImageProcessor(size={"shortest_edge": TINY_IMAGE_SIZE}, size_divisor=32),
                  tokenizer=tokenizer).save_pretrained(out_dir)
    return ItmSpec(id=str(out_dir), model_class="ViltForImageAndTextRetrieval", logits="logits", index=0)


def build_tiny_bridgetower(out_dir: Path, captions: list[str], seed: int) -> ItmSpec:
    """A byte-level BPE vocabulary of the captions; 288-pixel inputs (its image processor always resizes to 288)."""
    out_dir = Path(out_dir)
    (out_dir / "bpe").mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(captions, vocab_size=300, min_frequency=1, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    vocab, merges = bpe.save_model(str(out_dir / "bpe"))
    tokenizer = RobertaTokenizerFast(vocab=vocab, merges=merges, model_max_length=TEXT_POSITIONS)
    layer = {"hidden_size": 2 * WIDTH, "num_hidden_layers": 1}
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = BridgeTowerForImageAndTextRetrieval(BridgeTowerConfig(
            text_config={**layer, "vocab_size": len(tokenizer), "num_attention_heads": 2, "intermediate_size": 64,
                         "max_position_embeddings": TEXT_POSITIONS + 2},
            vision_config={**layer, "image_size": 288, "patch_size": 32}, **layer, num_attention_heads=2,
            intermediate_size=64))
    model.save_pretrained(out_dir)
    BridgeTowerProcessor(image_processor=BridgeTowerImageProcessor(do_center_crop=False),
                         tokenizer=tokenizer).save_pretrained(out_dir)
    return ItmSpec(id=str(out_dir), model_class="BridgeTowerForImageAndTextRetrieval", logits="logits", index=1)
