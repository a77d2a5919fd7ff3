"""CLIP scores of a generated pair (I_o, I_c) against its captions (C_o, C_c), via open_clip.

Embeddings are L2-normalised (float32 on the model's device), and every score is a cosine:
`sim_text_image_o = cos(E_T(C_o), E_I(I_o))`, `sim_text_image_c = cos(E_T(C_c), E_I(I_c))`,
`sim_image_image = cos(E_I(I_o), E_I(I_c))`, `clip_dir = cos(E_I(I_c) − E_I(I_o), E_T(C_c) − E_T(C_o))` (0 when a
difference is the zero vector). Images go through the model's own inference transform (PIL resize, centre crop).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import open_clip
import torch
import torch.nn.functional as F
from PIL import Image

from tasks.core.batches import invariant_map
from tasks.core.loading import load_once, resolve_device, resolve_dtype
from tasks.core.specs import ClipSpec

_PRECISION = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


@dataclass(frozen=True)
class ClipScorer:
    model: open_clip.CLIP | open_clip.CustomTextCLIP
    preprocess: Callable[[Image.Image], torch.Tensor]
    tokenizer: Callable[[list[str]], torch.Tensor]
    device: torch.device
    dtype: torch.dtype

    @torch.inference_mode()
    def embed_texts(self, texts: Sequence[str], batch_size: int) -> torch.Tensor:
        """(N, D) unit embeddings, each the same in any batch (`invariant_map`; open_clip's tokenizer pads every text
        to the model's context length and truncates there)."""
        def forward(batch: list[str]) -> torch.Tensor:
            return self.model.encode_text(self.tokenizer(batch).to(self.device), normalize=True).float()

        return stacked(invariant_map(forward, list(texts), batch_size))

    @torch.inference_mode()
    def embed_images(self, images: Sequence[np.ndarray], batch_size: int) -> torch.Tensor:
        """(N, D) unit embeddings of N >= 1 HxWx3 uint8 images, each the same in any batch (`invariant_map`)."""
        def forward(batch: list[np.ndarray]) -> torch.Tensor:
            pixels = torch.stack([self.preprocess(Image.fromarray(x)) for x in batch])
            return self.model.encode_image(pixels.to(self.device, self.dtype), normalize=True).float()

        return stacked(invariant_map(forward, images, batch_size))


def stacked(rows: list[torch.Tensor]) -> torch.Tensor:
    """(N, D) of N rows; (0, 0) of none."""
    return torch.stack(rows) if rows else torch.zeros(0, 0)


def register_config(config: str) -> None:
    """Make open_clip know the architecture in JSON file `config` (a loadable path, named by its file stem), once per
    content."""
    path = Path(config)
    if open_clip.get_model_config(path.stem) != json.loads(path.read_text()):
        open_clip.add_model_config(path)


@load_once
def load_clip(spec: ClipSpec) -> ClipScorer:
    """`spec.pretrained`: an open_clip tag for `spec.id` (its QuickGELU setting honoured) or a checkpoint path."""
    if spec.config is not None:
        register_config(spec.local(spec.config))
    device = resolve_device(spec)
    dtype = resolve_dtype(spec, device)
    quick_gelu = open_clip.get_pretrained_cfg(spec.id, spec.pretrained).get("quick_gelu", False)
    model, _, preprocess = open_clip.create_model_and_transforms(
        spec.id, pretrained=spec.local(spec.pretrained), precision=_PRECISION[dtype], device=device,
        force_quick_gelu=quick_gelu)
    return ClipScorer(model.eval(), preprocess, open_clip.get_tokenizer(spec.id), device, dtype)


def pair_scores(text_o: torch.Tensor, text_c: torch.Tensor, image_o: torch.Tensor,
                image_c: torch.Tensor) -> dict[str, list[float]]:
    """The four scores per row of unit embeddings (text rows broadcast against image rows)."""
    scores = {
        "sim_text_image_o": (text_o * image_o).sum(-1),
        "sim_text_image_c": (text_c * image_c).sum(-1),
        "sim_image_image": (image_o * image_c).sum(-1),
        "clip_dir": F.cosine_similarity(image_c - image_o, (text_c - text_o).expand_as(image_o), dim=-1),
    }
    return {name: values.tolist() for name, values in scores.items()}
