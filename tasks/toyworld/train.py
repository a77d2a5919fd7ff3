"""Trains the miniature models on toy-world scenes drawn on the fly (CPU, seeded): `train(out, Schedule(...))`.

In order: the VAE (reconstruction), the text encoder + UNet of SD v1 (DDPM ε-loss on the VAE's latents, 10% of the
captions dropped for classifier-free guidance, an EMA of the UNet kept), the open_clip model (contrastive, with a
hard negative per image: its caption with one fact changed), then the masked and causal LMs on captions. Each writes
its compact weights (`models.compact`) to `out`, with `train.json`: the schedule, the losses and the wall times.
"""

from __future__ import annotations

import json
import logging
import random
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import DDPMScheduler
from diffusers.training_utils import EMAModel
from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD
from transformers import AutoTokenizer, DataCollatorForLanguageModeling

from tasks.demo.tiny_images import SD_BETAS, TINY_IMAGE_SIZE, clip_bpe_tokenizer
from tasks.demo.tiny_text import train_vocab
from tasks.toyworld import models, world
from tasks.toyworld.params import Schedule

log = logging.getLogger(__name__)
SUBJECT_PROMPT = "a photo of a {word}"  # the both-subjects check's prompt (generate.subject_prompt)


def draw(rng: random.Random, n: int) -> tuple[torch.Tensor, list[world.Spec]]:
    """(n, 3, 32, 32) images in [-1, 1] and their specs."""
    specs, pixels = [], []
    for _ in range(n):
        spec, scene = world.sample(rng)
        specs.append(spec)
        pixels.append(world.render(scene, TINY_IMAGE_SIZE))
    images = torch.from_numpy(np.stack(pixels)).permute(0, 3, 1, 2).float() / 127.5 - 1
    return images, specs


def negative(rng: random.Random, spec: world.Spec) -> world.Spec:
    """`spec` with one fact changed: a shape, a colour, the relation, or the two phrases' places."""
    i = rng.randrange(len(spec.phrases))
    phrase = spec.phrases[i]
    kind = rng.choice(["shape", "colour"] + (["relation", "order"] if spec.relation else []))
    if kind == "shape":
        return world.with_phrase(spec, i, shape=rng.choice([s for s in world.SHAPES if s != phrase.shape]))
    if kind == "colour":
        return world.with_phrase(spec, i, colour=rng.choice([c for c in world.COLOURS if c != phrase.colour]))
    if kind == "relation":
        return replace(spec, relation=rng.choice([r for r in world.RELATIONS if r != spec.relation]))
    return replace(spec, phrases=spec.phrases[::-1])


def token_ids(tokenizer, rng: random.Random, n: int = 4000) -> torch.Tensor:
    """Every token of the world's captions, its subject prompts and the empty prompt, sorted."""
    texts = [world.caption(world.sample(rng)[0]) for _ in range(n)] + [""]
    texts += [SUBJECT_PROMPT.format(word=w) for w in (*world.SHAPES, *world.COLOURS, *world.SIZES)]
    ids = {i for row in tokenizer(texts)["input_ids"] for i in row}
    return torch.tensor(sorted(ids))


def _steps(name: str, steps: int, loss_of, params: list, lr: float, after=None) -> list[float]:
    """`steps` AdamW steps (one-cycle learning rate, clipped gradients) on `loss_of(step)`; `after()` follows each."""
    optimizer = torch.optim.AdamW(params, lr=lr)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, lr, total_steps=steps, pct_start=0.05)
    losses = []
    for step in range(steps):
        loss = loss_of(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        if after:
            after()
        losses.append(loss.item())
        if step % 100 == 0 or step == steps - 1:
            log.info("%s step %d/%d loss %.4f", name, step + 1, steps, np.mean(losses[-100:]))
    return losses


def train_vae(vae, rng: random.Random, schedule: Schedule) -> tuple[list[float], float]:
    """Reconstruction + a small KL; returns the losses and the latent scaling factor (1 / std of the latents)."""
    def loss_of(_):
        images, _ = draw(rng, schedule.batch)
        posterior = vae.encode(images).latent_dist
        return F.mse_loss(vae.decode(posterior.sample()).sample, images) + 1e-6 * posterior.kl().mean()

    losses = _steps("vae", schedule.vae_steps, loss_of, list(vae.parameters()), schedule.lr)
    with torch.no_grad():
        std = vae.encode(draw(rng, 256)[0]).latent_dist.mode().std()
    return losses, float(1 / std)


def train_diffusion(unet, text_encoder, vae, scale: float, rng: random.Random, schedule: Schedule) -> list[float]:
    tokenizer, noise = clip_bpe_tokenizer(), DDPMScheduler(num_train_timesteps=1000, **{
        k: SD_BETAS[k] for k in ("beta_start", "beta_end", "beta_schedule")})
    ema = EMAModel(unet.parameters(), decay=0.999)
    vae.requires_grad_(False)

    def loss_of(_):
        images, specs = draw(rng, schedule.batch)
        texts = [world.caption(s) if rng.random() >= 0.1 else "" for s in specs]
        ids = tokenizer(texts, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
        with torch.no_grad():
            latents = vae.encode(images).latent_dist.mode() * scale
        eps = torch.randn_like(latents)
        t = torch.randint(0, 1000, (len(latents),))
        states = text_encoder(ids)[0]
        return F.mse_loss(unet(noise.add_noise(latents, eps, t), t, encoder_hidden_states=states).sample, eps)

    params = [*unet.parameters(), *text_encoder.parameters()]
    losses = _steps("diffusion", schedule.diffusion_steps, loss_of, params, schedule.lr,
                    after=lambda: ema.step(unet.parameters()))
    ema.copy_to(unet.parameters())
    return losses


def train_clip(model, rng: random.Random, schedule: Schedule) -> list[float]:
    tokenizer = clip_bpe_tokenizer()
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (OPENAI_DATASET_MEAN, OPENAI_DATASET_STD))

    def loss_of(_):
        images, specs = draw(rng, 4 * schedule.batch)
        texts = [world.caption(s) for s in specs] + [world.caption(negative(rng, s)) for s in specs]
        ids = tokenizer(texts, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
        image = model.encode_image(((images + 1) / 2 - mean) / std, normalize=True)
        text = model.encode_text(ids, normalize=True)
        logits = model.logit_scale.exp() * image @ text.T
        target = torch.arange(len(specs))
        return (F.cross_entropy(logits, target) + F.cross_entropy(logits[:, :len(specs)].T, target)) / 2

    return _steps("clip", schedule.clip_steps, loss_of, list(model.parameters()), schedule.lr)


def train_lm(model, tokenizer, rng: random.Random, schedule: Schedule, masked: bool) -> list[float]:
    collate = DataCollatorForLanguageModeling(tokenizer, mlm=masked, return_tensors="pt")

    def loss_of(_):
        texts = [world.caption(world.sample(rng)[0]) for _ in range(schedule.batch)]
        batch = collate([tokenizer(t) for t in texts])
        return model(**batch).loss

    return _steps("mlm" if masked else "clm", schedule.lm_steps, loss_of, list(model.parameters()), schedule.lr)


def train(out: Path, schedule: Schedule) -> dict:
    """Train every miniature model and write its compact weights, the LMs' vocabulary and `train.json` to `out`;
    returns the record."""
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(schedule.seed)
    rng = random.Random(schedule.seed)
    record: dict = {"schedule": asdict(schedule), "torch": torch.__version__, "seconds": {}}
    ids = token_ids(clip_bpe_tokenizer(), random.Random(schedule.seed))
    losses = {}

    def timed(name, fn):
        start = time.perf_counter()
        result = fn()
        record["seconds"][name] = round(time.perf_counter() - start, 1)
        return result

    unet, vae, text_encoder = models.diffusion_modules()
    losses["vae"], record["scaling_factor"] = timed("vae", lambda: train_vae(vae, rng, schedule))
    losses["diffusion"] = timed("diffusion", lambda: train_diffusion(unet, text_encoder, vae,
                                                                     record["scaling_factor"], rng, schedule))
    models.save(out / "diffusion.safetensors", {
        "unet": models.half(unet.state_dict()), "vae": models.half(vae.state_dict()),
        "text_encoder": models.compact(text_encoder.state_dict(), models.EMBEDDINGS["text_encoder"], ids)})
    clip = models.clip_model()
    losses["clip"] = timed("clip", lambda: train_clip(clip, rng, schedule))
    models.save(out / "clip.safetensors", {"clip": models.compact(clip.state_dict(), models.EMBEDDINGS["clip"], ids)})

    vocab, merges = train_vocab([world.caption(world.sample(rng)[0]) for _ in range(2000)], out / "vocab", 1000)
    with tempfile.TemporaryDirectory() as scratch:
        for name, build, cls, shape in models.LMS:
            folder = Path(scratch) / name
            build(vocab, merges, folder, models.LM_MAX_LENGTH, **shape)
            model = cls.from_pretrained(folder).train()
            tokenizer = AutoTokenizer.from_pretrained(folder)
            losses[name] = timed(name, lambda: train_lm(model, tokenizer, rng, schedule, masked=name == "mlm"))
            models.save(out / f"{name}.safetensors", {name: {k: v.detach().clone().contiguous()
                                                            for k, v in model.state_dict().items()}})
    record["losses_per_50_steps"] = {name: [round(float(np.mean(l[i:i + 50])), 5) for i in range(0, len(l), 50)]
                                     for name, l in losses.items()}
    (out / "train.json").write_text(json.dumps(record, indent=1))
    return record
