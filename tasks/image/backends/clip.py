"""What the CLIP-conditioned backends (sd1, sdxl, sd3) share: `ClipBackend`, the protocol's common fields once, and
the loading of a diffusers folder's parts. It imports no backend and no backend imports another, so a sample's key
holds the chosen backend's module, this one and what they import."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from diffusers import AutoencoderKL, SchedulerMixin, UNet2DConditionModel
from transformers import CLIPTokenizer

from tasks.core.loading import hub_kwargs, load_once, resolve_device, resolve_dtype
from tasks.core.specs import ModelSpec

if TYPE_CHECKING:
    from diffusers import ModelMixin
    from transformers import PreTrainedModel

SchedulerT = TypeVar("SchedulerT", bound=SchedulerMixin)


@dataclass(frozen=True, kw_only=True)
class ClipBackend:
    """The `Diffusion` protocol's fields (but `denoiser`: each backend names its own) and the VAE, on one
    device/dtype; `compile_mode`: the denoiser's (None: eager); `latent_factor`: `latent_factor(vae)`. Prompts are
    bound by the diffusion folder's CLIP tokenizer (77 tokens)."""

    vae: AutoencoderKL
    scheduler: SchedulerMixin
    compile_mode: str | None
    device: torch.device
    dtype: torch.dtype
    latent_channels: int
    latent_factor: int
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @classmethod
    def token_counts(cls, spec: ModelSpec, caption: str,
                     counterfactual: str) -> tuple[tuple[int, int], tuple[bool, bool]]:
        """From the folder's tokenizer alone, no weights loaded."""
        return token_counts(load_tokenizer(spec), caption, counterfactual)


def latent_factor(vae: AutoencoderKL) -> int:
    """How many pixels a latent spans per side: 2 per VAE down block after the first (8 for SD's)."""
    return 2 ** (len(vae.config.block_out_channels) - 1)


@load_once
def load_tokenizer(spec: ModelSpec, subfolder: str = "tokenizer") -> CLIPTokenizer:
    """A tokenizer of the diffusion folder alone (cheap: prompt checks need no weights)."""
    return CLIPTokenizer.from_pretrained(spec.local(), subfolder=subfolder, **hub_kwargs(spec))


def token_counts(tokenizer: CLIPTokenizer, caption: str, counterfactual: str) -> tuple[tuple[int, int],
                                                                                   tuple[bool, bool]]:
    """Untruncated token counts of C_o and C_c, and whether each exceeds the tokenizer's limit (77 for SD)."""
    count_o, count_c = (len(ids) for ids in tokenizer([caption, counterfactual], verbose=False)["input_ids"])
    return (count_o, count_c), (count_o > tokenizer.model_max_length, count_c > tokenizer.model_max_length)


def clip_states(tokenizers: Sequence[CLIPTokenizer], encoders: Sequence[torch.nn.Module], texts: list[str],
                device: torch.device) -> tuple[list[torch.Tensor], torch.Tensor, list[Any]]:
    """What SDXL and SD3 condition on, per CLIP encoder: its input ids of `texts` (padded and truncated to 77
    tokens), and its outputs; with every encoder's penultimate states concatenated (len(texts), 77, sum of widths)."""
    ids = [tokenizer(texts, padding="max_length", truncation=True, max_length=tokenizer.model_max_length,
                     return_tensors="pt")["input_ids"] for tokenizer in tokenizers]
    outs = [encoder(one.to(device), output_hidden_states=True) for encoder, one in zip(encoders, ids)]
    return ids, torch.cat([out.hidden_states[-2] for out in outs], -1), outs


def load_parts(spec: ModelSpec, vae: ModelSpec | None, channels_last: bool, encoders: dict[str, type[PreTrainedModel]],
               denoiser: tuple[str, type[ModelMixin]] = ("unet", UNet2DConditionModel),
               ) -> tuple[dict[str, ModelMixin | PreTrainedModel], torch.device, torch.dtype]:
    """The `denoiser` (subfolder, class), VAE (`vae` replaces the folder's vae/) and text `encoders` (subfolder ->
    class) of `spec`'s diffusers folder (id or path), on its device and dtype (fp32 on CPU: resolve_dtype) in eval
    mode; `channels_last` stores the denoiser's and VAE's convolutions NHWC."""
    path, device, kwargs = spec.local(), resolve_device(spec), hub_kwargs(spec)
    dtype = resolve_dtype(spec, device)
    if vae is None:
        vae_model = AutoencoderKL.from_pretrained(path, subfolder="vae", dtype=dtype, **kwargs)
    else:
        vae_model = AutoencoderKL.from_pretrained(vae.local(), dtype=dtype, **hub_kwargs(vae))
    folder, kind = denoiser
    unet = kind.from_pretrained(path, subfolder=folder, dtype=dtype, **kwargs)
    parts = {folder: unet, "vae": vae_model, **{name: model.from_pretrained(path, subfolder=name, dtype=dtype, **kwargs)
                                               for name, model in encoders.items()}}
    for module in parts.values():
        module.to(device).eval().requires_grad_(False)
    if channels_last:
        unet.to(memory_format=torch.channels_last)
        vae_model.to(memory_format=torch.channels_last)
    return parts, device, dtype


def model_index(spec: ModelSpec) -> dict:
    """The folder's model_index.json ({} without one: a hub id not yet fetched)."""
    index = Path(spec.local()) / "model_index.json"
    return json.loads(index.read_text()) if index.is_file() else {}


def load_scheduler(spec: ModelSpec, kind: type[SchedulerT]) -> SchedulerT:
    """The folder's scheduler config as `kind` (what the backend's `steps` step)."""
    return kind.from_pretrained(spec.local(), subfolder="scheduler", **hub_kwargs(spec))
