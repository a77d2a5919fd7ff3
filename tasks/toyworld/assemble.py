"""The toy-world weights (`tasks/toyworld/weights`, written by `cfgen toy-world train`) saved in the layouts the
pipeline loads: `diffusion/` (SD v1: unet, vae, text_encoder, tokenizer, scheduler), `clip/` (open_clip JSON +
checkpoint), `mlm/` and `clm/` (transformers folders with the world vocabulary's tokenizers). The UNet's shape and the
VAE's scaling factor are what `train.json` records. Deterministic: the same weights give byte-identical folders, so
model fingerprints and cache keys are stable. `RECORD` beside them names what was assembled from what: the weights'
and the diffusion folder's `content_hash`, so truth can check its model without assembling again."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save_file

from tasks.core.fingerprints import content_hash
from tasks.core.writing import write_json
from tasks.tiny.images import TINY_CLIP_NAME, clip_bpe_tokenizer
from tasks.toyworld import models
from tasks.toyworld.params import RECORD, Schedule


def assemble(weights: Path, out: Path) -> None:
    record = json.loads((weights / "train.json").read_text())
    states = models.load(weights / "diffusion.safetensors")
    schedule = Schedule.from_record(record["schedule"])
    unet, vae, text_encoder = models.diffusion_modules(schedule.attention_heads)
    unet.load_state_dict(models.full(states["unet"]))
    vae.load_state_dict(models.full(states["vae"]))
    vae.register_to_config(scaling_factor=record["scaling_factor"])
    text_encoder.load_state_dict(models.expand(states["text_encoder"], models.EMBEDDINGS["text_encoder"]))
    for name, module in (("unet", unet), ("vae", vae), ("text_encoder", text_encoder)):
        module.save_pretrained(out / "diffusion" / name)
    clip_bpe_tokenizer().save_pretrained(out / "diffusion" / "tokenizer")
    models.scheduler(schedule.spacing).save_pretrained(out / "diffusion" / "scheduler")

    clip = out / "clip"
    clip.mkdir(parents=True, exist_ok=True)
    (clip / f"{TINY_CLIP_NAME}.json").write_text(json.dumps(models.CLIP_CONFIG, indent=2))
    state = models.expand(models.load(weights / "clip.safetensors")["clip"], models.EMBEDDINGS["clip"])
    save_file({k: v.contiguous() for k, v in state.items()}, str(clip / "tiny_clip.safetensors"))

    vocab, merges = str(weights / "vocab" / "vocab.json"), str(weights / "vocab" / "merges.txt")
    for name, build, cls, shape in models.LMS:
        build(vocab, merges, out / name, models.LM_MAX_LENGTH, **shape)  # the tokenizer, and a model to load into
        model = cls.from_pretrained(out / name)
        model.load_state_dict(models.load(weights / f"{name}.safetensors")[name])
        model.save_pretrained(out / name)
    write_json({"weights": content_hash(weights), "diffusion": content_hash(out / "diffusion")}, out / RECORD)
