"""Asking the VLM judge: a selected pair's yes/no questions and each answer's P(Yes), read from the model's logits.

A pair is asked about the words its edit changed: C_o's (`original_word`) and C_c's (`substitute`), as
`edited_word` gives them (a quantifier edit: the counted phrases; insert: only the inserted phrase, delete: only the
deleted one). Each word is asked of both images with its edit type's template: I_o shows the original, I_c the
substitute, and the two crossed questions. A question whose word is empty is not asked (its P(Yes) is None and
passes the verdict).

P(Yes) is the softmax over the next-token logits of the two ANSWERS (each read as its first token) after the
model's own chat prompt: no sampling, so equal inputs give equal answers. The model runs in float32 on CPU and in its
own dtype (or the spec's) on a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tasks.core.batches import invariant_map
from tasks.core.edits import EditType, edited_word
from tasks.core.loading import hub_kwargs, load_once, resolve_device, resolve_dtype
from tasks.core.schemas import JUDGE_QUESTIONS
from tasks.core.specs import ModelSpec
from tasks.judge.params import JudgeParams

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

ANSWERS = ("Yes", "No")
ASKED = {"original_o": ("o", "original_word"), "substitute_c": ("c", "substitute"),  # question -> (image, word)
         "substitute_o": ("o", "substitute"), "original_c": ("c", "original_word")}


def questions(pair: dict, templates: Mapping[EditType, str]) -> dict[str, tuple[str, str]]:
    """question -> (image side, question text) of one pair (PAIR columns); questions about an empty word left out."""
    template = templates[pair["edit_type"]]
    return {name: (side, template.format(word=word)) for name, (side, column) in ASKED.items()
            if (word := edited_word(pair[column] or "", pair["edit_type"]))}


@load_once
def load_judge(spec: ModelSpec) -> tuple:
    """(processor, model in eval mode, device) for an image-text-to-text model."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    device = resolve_device(spec)
    dtype = "auto" if spec.dtype == "auto" and device.type == "cuda" else resolve_dtype(spec, device)
    processor = AutoProcessor.from_pretrained(spec.local(), **hub_kwargs(spec))
    model = AutoModelForImageTextToText.from_pretrained(spec.local(), dtype=dtype, **hub_kwargs(spec))
    return processor, model.to(device).eval(), device


def answer_ids(processor, answers: Sequence[str]) -> list[int]:
    """The first token id of each answer, as the tokenizer encodes it alone."""
    ids = [processor.tokenizer.encode(answer, add_special_tokens=False) for answer in answers]
    if not all(ids) or len({i[0] for i in ids}) < len(ids):
        raise ValueError(f"answers {list(answers)} need distinct first tokens in {processor.tokenizer.name_or_path}")
    return [i[0] for i in ids]


def prompt(processor, text: str) -> str:
    """One image and the question, in the model's chat template, ready for the answer's first token."""
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def p_yes(model: PreTrainedModel, processor, device: torch.device, images: Sequence[np.ndarray],
          texts: Sequence[str], answers: Sequence[str], batch_size: int) -> list[float]:
    """P(Yes) of each (image, question), the same in any batch (`invariant_map`: at most `batch_size` questions per
    forward pass, batched with questions of their own input shapes, unpadded). Each question is processed once, alone:
    a batch is its questions' inputs stacked."""
    import torch

    ids = answer_ids(processor, answers)
    asked = [processor(text=[prompt(processor, t)], images=[x], return_tensors="pt") for t, x in zip(texts, images)]

    def forward(batch: list) -> list[float]:
        inputs = {k: torch.cat([one[k] for one in batch]) for k in batch[0]}
        inputs = {k: v.to(device, model.dtype) if v.is_floating_point() else v.to(device) for k, v in inputs.items()}
        with torch.inference_mode():
            logits = model(**inputs, logits_to_keep=1, use_cache=False).logits[:, -1, ids].float()
        return torch.softmax(logits, dim=-1)[:, 0].tolist()

    return invariant_map(forward, asked, batch_size, [tuple((k, tuple(v.shape)) for k, v in one.items())
                                                      for one in asked])


def ask(pair: dict, images: dict[str, np.ndarray], params: JudgeParams) -> dict[str, float | None]:
    """P(Yes) of every question (`JUDGE_QUESTIONS`) about one pair; `images` maps side ("o", "c") to its pixels."""
    asked = questions(pair, params.templates)
    processor, model, device = load_judge(params.model)
    found = p_yes(model, processor, device, [images[side] for side, _ in asked.values()],
                  [text for _, text in asked.values()], ANSWERS, params.batch_size)
    return {name: dict(zip(asked, found)).get(name) for name in JUDGE_QUESTIONS}
