"""A tiny random vision-language model for the demo's judge stage and the tests: LLaVA-shaped (a CLIP vision tower,
a projector and a Llama decoder) with its processor and a minimal chat template, in the hub layout that
`AutoModelForImageTextToText` / `AutoProcessor` load. Its byte-level BPE vocabulary is trained on the captions and
the yes/no answers. Same captions + seed give byte-identical folders."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import (
    CLIPImageProcessor,
    GPT2TokenizerFast,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
)

from tasks.core.specs import ModelSpec
from tasks.tiny.images import TINY_IMAGE_SIZE

WIDTH, PATCH, IMAGE_TOKEN = 32, 8, "<image>"
SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", IMAGE_TOKEN]
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {% for c in m['content'] %}{% if c['type'] == 'image' %}"
                 "<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


def build_tiny_vlm(out_dir: Path, captions: list[str], seed: int) -> ModelSpec:
    out_dir = Path(out_dir)
    (out_dir / "bpe").mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([*captions, "Yes", "No"], vocab_size=400, min_frequency=1, show_progress=False,
                            special_tokens=SPECIAL_TOKENS)
    vocab, merges = bpe.save_model(str(out_dir / "bpe"))
    tokenizer = GPT2TokenizerFast(vocab=vocab, merges=merges, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="<pad>", extra_special_tokens={"image_token": IMAGE_TOKEN})
    size = {"height": TINY_IMAGE_SIZE, "width": TINY_IMAGE_SIZE}
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": TINY_IMAGE_SIZE}, crop_size=size),
        tokenizer=tokenizer, patch_size=PATCH, vision_feature_select_strategy="default", chat_template=CHAT_TEMPLATE,
        image_token=IMAGE_TOKEN, num_additional_image_tokens=1)  # the vision tower's CLS token, dropped by "default"
    layer = {"hidden_size": WIDTH, "intermediate_size": 2 * WIDTH, "num_attention_heads": 2}
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlavaForConditionalGeneration(LlavaConfig(
            vision_config={"model_type": "clip_vision_model", **layer, "num_hidden_layers": 1,
                           "image_size": TINY_IMAGE_SIZE, "patch_size": PATCH},
            text_config={"model_type": "llama", **layer, "num_hidden_layers": 2, "num_key_value_heads": 2,
                         "vocab_size": len(tokenizer), "max_position_embeddings": 256,
                         "pad_token_id": tokenizer.pad_token_id},
            image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN), vision_feature_select_strategy="default",
            vision_feature_layer=-1))
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return ModelSpec(id=str(out_dir))
