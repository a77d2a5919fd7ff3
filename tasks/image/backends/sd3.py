"""Stable Diffusion 3 / 3.5: an MM-DiT transformer (`SD3Transformer2DModel`) predicting flow-matching velocity,
conditioned as `StableDiffusion3Pipeline` conditions it: CLIP-L's and CLIP-G's penultimate states (77 tokens each)
concatenated, zero-padded to T5's width and followed by T5's states (256 tokens; zeros when the folder has no
text_encoder_3/, as the pipeline does), and both CLIPs' pooled projections concatenated; the unconditional prompt is
"" encoded. A 16-channel VAE with `shift_factor`; the folder's `FlowMatchEulerDiscreteScheduler` (its `shift`)
stepped as flow-matching Euler (`sampling.FlowStep`). Rows are SD v1's (`[uncond·C_o, uncond·C_c, cond·C_o,
cond·C_c]` per sample, classifier-free guidance); sharing is `joint_p2p`'s, in the blocks `generate.p2p_layers`
lists."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
from transformers import CLIPTextModelWithProjection, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

from tasks.core.loading import compiled, hub_kwargs, load_once
from tasks.core.specs import ModelSpec
from tasks.image import joint_p2p
from tasks.image.backends.clip import (ClipBackend, clip_states, latent_factor, load_parts, load_scheduler,
                                       load_tokenizer, model_index, token_counts)
from tasks.image.params import GenerateParams
from tasks.image.sampling import compile_mode, flow_steps

T5_TOKENS = 256  # the pipeline's default `max_sequence_length`


@dataclass(frozen=True)
class Prompts:
    """`[uncond, C_o, C_c]`: the joint text states (3, 77 + 256, D) and pooled projections (3, P); per caption:
    untruncated CLIP token count, truncated?"""

    states: torch.Tensor
    pooled: torch.Tensor
    token_counts: tuple[int, int]
    truncated: tuple[bool, bool]


@dataclass(frozen=True)
class SD3(ClipBackend):
    """SD3 components, `joint_p2p` processors installed in `transformer` (compiled when `compile_mode` is set); `t5`:
    (tokenizer, encoder), or None (zeros in its place). CLIP's 77 tokens bind the prompts (T5 reads 256)."""

    tokenizers: tuple[CLIPTokenizer, CLIPTokenizer]
    text_encoders: tuple[torch.nn.Module, torch.nn.Module]
    t5: tuple[T5TokenizerFast, torch.nn.Module] | None
    transformer: torch.nn.Module
    text_width: int  # the transformer's joint_attention_dim
    steps = staticmethod(flow_steps)

    @classmethod
    def load(cls, params: GenerateParams) -> SD3:
        return load_diffusion(params.diffusion, params.vae, params.p2p_layers, params.channels_last,
                              params.compile_unet)

    @property
    def denoiser(self) -> torch.nn.Module:
        return self.transformer

    @torch.inference_mode()
    def encode(self, caption: str, counterfactual: str) -> Prompts:
        """Prompts longer than CLIP's 77 tokens are truncated there and flagged."""
        texts = ["", caption, counterfactual]
        _, clip, outs = clip_states(self.tokenizers, self.text_encoders, texts, self.device)
        if self.t5 is None:
            t5 = torch.zeros(3, T5_TOKENS, self.text_width, device=self.device, dtype=self.dtype)
        else:
            tokenizer, encoder = self.t5
            ids = tokenizer(texts, padding="max_length", max_length=T5_TOKENS, truncation=True,
                            add_special_tokens=True, return_tensors="pt")["input_ids"]
            t5 = encoder(ids.to(self.device))[0]
        clip = torch.nn.functional.pad(clip, (0, t5.shape[-1] - clip.shape[-1]))
        return Prompts(torch.cat([clip, t5], -2), torch.cat([out[0] for out in outs], -1),
                       *token_counts(self.tokenizers[0], caption, counterfactual))

    def condition(self, prompts: Prompts, n: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`n` samples' rows `[uncond, uncond, C_o, C_c]`: (states, pooled) (any size)."""
        rows = torch.tensor([0, 0, 1, 2], device=self.device).repeat(n)
        return prompts.states[rows], prompts.pooled[rows]

    def denoise(self, rows: torch.Tensor, t: torch.Tensor, conditioning: tuple[torch.Tensor, torch.Tensor],
                shared: torch.Tensor | None) -> torch.Tensor:
        states, pooled = conditioning
        return self.transformer(hidden_states=rows, timestep=t.expand(len(rows)), encoder_hidden_states=states,
                                pooled_projections=pooled, joint_attention_kwargs={"p2p_shared": shared}).sample

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        config = self.vae.config
        return self.vae.decode(latents / config.scaling_factor + config.shift_factor).sample


def has_t5(spec: ModelSpec) -> bool:
    """Whether the folder holds T5 (model_index.json names a text_encoder_3; a folder without the index: yes)."""
    return (model_index(spec).get("text_encoder_3") or [None])[0] is not None


@load_once
def load_diffusion(spec: ModelSpec, vae: ModelSpec | None, layers: tuple[int, ...] | None,
                   channels_last: bool = False, compile_unet: str = "off") -> SD3:
    """Components from `spec`'s SD3 folder (`clip.load_parts`): the transformer gets `joint_p2p` processors sharing in
    `layers` (None: every joint block), then `torch.compile` in the `compile_unet` mode (`sampling.compile_mode`)."""
    t5 = has_t5(spec)
    encoders = {"text_encoder": CLIPTextModelWithProjection, "text_encoder_2": CLIPTextModelWithProjection,
                **({"text_encoder_3": T5EncoderModel} if t5 else {})}
    parts, device, dtype = load_parts(spec, vae, channels_last, encoders,
                                      denoiser=("transformer", SD3Transformer2DModel))
    transformer, vae_model = parts["transformer"], parts["vae"]
    joint_p2p.install(transformer, layers)
    mode = compile_mode(compile_unet, device)
    t5_tokenizer = T5TokenizerFast.from_pretrained(spec.local(), subfolder="tokenizer_3", **hub_kwargs(spec)) \
        if t5 else None
    return SD3(tokenizers=(load_tokenizer(spec), load_tokenizer(spec, "tokenizer_2")),
               text_encoders=(parts["text_encoder"], parts["text_encoder_2"]),
               t5=(t5_tokenizer, parts["text_encoder_3"]) if t5 else None,
               transformer=compiled(transformer, mode), vae=vae_model,
               scheduler=load_scheduler(spec, FlowMatchEulerDiscreteScheduler), compile_mode=mode, device=device,
               dtype=dtype, latent_channels=transformer.config.in_channels, latent_factor=latent_factor(vae_model),
               text_width=transformer.config.joint_attention_dim)
