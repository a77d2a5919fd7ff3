"""Diffusers folder layouts: the components (sub-folder -> files, one of which holds it) a pipeline's loader reads
besides vae/ (`generate.vae` may replace that one). Declared here, apart from any stage's params, so that a check of
a folder imports no stage's section."""

from __future__ import annotations

CLIP_TEXT = ("config.json",)
CLIP_TOKENIZER = ("tokenizer.json", "vocab.json")
SCHEDULER = ("scheduler_config.json",)

SD1 = {"unet": ("config.json",), "text_encoder": CLIP_TEXT, "tokenizer": CLIP_TOKENIZER, "scheduler": SCHEDULER}
# SD 3's required ones: text_encoder_3/ and tokenizer_3/ (T5) are optional (zeros without them)
SD3 = {"transformer": ("config.json",), "text_encoder": CLIP_TEXT, "text_encoder_2": CLIP_TEXT,
       "tokenizer": CLIP_TOKENIZER, "tokenizer_2": CLIP_TOKENIZER, "scheduler": SCHEDULER}
SDXL = {"unet": ("config.json",), "text_encoder": CLIP_TEXT, "text_encoder_2": CLIP_TEXT,
        "tokenizer": CLIP_TOKENIZER, "tokenizer_2": CLIP_TOKENIZER, "scheduler": SCHEDULER}
