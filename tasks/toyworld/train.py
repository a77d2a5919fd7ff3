"""Trains the miniature models on toy-world scenes (seeded, on the CPU or a GPU): `train(out, Schedule(...), Run(...))`.

In order: the VAE (reconstruction), the text encoder + UNet of SD v1 (DDPM ε-loss on the VAE's latents, Min-SNR-γ
weighted when the schedule says so, 10% of the captions dropped for classifier-free guidance, an EMA of the UNet
kept), the open_clip model (contrastive, with a hard negative per image: its caption with one fact changed), then the
masked and causal LMs on captions. Each writes its compact weights (`models.compact`) to `out`, with `train.json`:
the schedule, the device, the losses, the wall times and the diffusion model's accuracy curve. The batches come
from `batches`, the loops, checkpoints and progress bar from `loop`, the accuracy read-out from `accuracy`.

Invariants:
- What a run computes is its `Schedule`'s, on its device (and with `Run.compile_unet` when set): `Run`'s other fields
  (workers, checkpoints, progress bar, accuracy read-outs) change no weight. With the default `Schedule` on the CPU
  it computes what the committed weights' run did on a machine like the one that ran it (another CPU model computes
  other bits: README, "The same bytes from the same inputs").
- The draws outside the loops' batches are the `Trainer`'s stream's (the VAE's latent scale, the LMs' vocabulary),
  whose state each checkpoint holds, or their own seeded generator's (`batches.token_ids`): a run killed and resumed
  ends as an uninterrupted one (`loop`).
"""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import DDPMScheduler
from diffusers.training_utils import EMAModel
from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD
from transformers import AutoTokenizer, DataCollatorForLanguageModeling

from tasks.core.loading import compiled
from tasks.core.writing import finite, json_text
from tasks.tiny.images import SD_BETAS
from tasks.tiny.text import train_vocab
from tasks.toyworld import folders, grounding, models, parse, world
from tasks.toyworld.accuracy import accuracy, sampler
from tasks.toyworld.batches import caption_batch, clip_batch, diffusion_batch, draw, token_ids, vae_batch
from tasks.toyworld.loop import Loop, Run, Trainer, check_steps, progress_bar
from tasks.toyworld.params import Schedule

# ---- the models ----

def train_vae(t: Trainer, vae) -> tuple[list[float], float]:
    """Reconstruction + a small KL; returns the losses and the latent scaling factor (1 / std of the latents)."""
    def loss_of(images):
        images = images.to(t.device, non_blocking=True)
        posterior = vae.encode(images).latent_dist
        return F.mse_loss(vae.decode(posterior.sample()).sample, images) + 1e-6 * posterior.kl().mean()

    losses = t.fit(Loop("vae", t.schedule.vae_steps, vae_batch, t.schedule.batch, loss_of, {"vae": vae}))
    with torch.no_grad():
        std = vae.encode(draw(t.rng, 256)[0].to(t.device)).latent_dist.mode().std()
    return losses, float(1 / std)


def min_snr_weights(alphas_cumprod: torch.Tensor, gamma: float) -> torch.Tensor:
    """Per timestep, min(SNR, γ) / SNR: the ε-loss weight of Min-SNR-γ (Hang et al., 2023), which keeps the nearly
    clean timesteps from dominating the gradient."""
    snr = alphas_cumprod / (1 - alphas_cumprod)
    return snr.clamp(max=gamma) / snr


def train_parse(t: Trainer, text_encoder) -> tuple[list[float], float]:
    """The text encoder alone, parsing captions through `parse.Heads` (dropped afterwards); returns the losses and
    the heads' accuracy on 1,024 captions drawn from their own seed."""
    heads = parse.Heads(text_encoder.config.hidden_size).to(t.device)

    def loss_of(batch):
        ids, labels = (x.to(t.device, non_blocking=True) for x in batch)
        return heads.losses(text_encoder(ids)[0], labels)[0]

    losses = t.fit(Loop("parse", t.schedule.parse_steps, parse.batch, 8 * t.schedule.batch, loss_of,
                        {"text_encoder": text_encoder, "heads": heads}))
    ids, labels = (x.to(t.device) for x in parse.batch(random.Random("parse accuracy"), 1024))
    with torch.no_grad():
        return losses, round(float(heads.losses(text_encoder(ids)[0], labels)[1]), 4)


def timesteps(t: Trainer, n: int) -> torch.Tensor:
    """n training timesteps: uniform, but for a `low_snr` share drawn from t ≥ LOW_SNR_T in the first half."""
    steps = torch.randint(0, 1000, (n,), device=t.device)
    if t.schedule.low_snr and t.step <= t.schedule.diffusion_steps // 2:
        tilted = torch.rand(n, device=t.device) < t.schedule.low_snr
        steps = torch.where(tilted, torch.randint(Schedule.LOW_SNR_T, 1000, (n,), device=t.device), steps)
    return steps


def train_diffusion(t: Trainer, unet, text_encoder, vae, scale: float) -> dict[str, list[float]]:
    """The UNet (and the text encoder, unless `parse_steps` pre-trained it: then it stays frozen) on the frozen VAE's
    latents, plus the grounding loss when the schedule weighs it; the UNet ends with its EMA's weights. Returns the
    losses (and the unweighted grounding losses)."""
    s = t.schedule
    noise = DDPMScheduler(num_train_timesteps=1000, **{k: SD_BETAS[k] for k in ("beta_start", "beta_end",
                                                                               "beta_schedule")})
    ema = EMAModel(unet.parameters(), decay=s.ema_decay, foreach=t.device.type == "cuda")
    vae.requires_grad_(False)
    frozen = s.parse_steps > 0
    text_encoder.requires_grad_(not frozen)
    weights = None if s.min_snr_gamma is None else min_snr_weights(noise.alphas_cumprod.to(t.device), s.min_snr_gamma)
    maps = grounding.record(unet) if s.grounding else None
    forward = compiled(unet, "default" if t.run.compile_unet else None)

    def loss_of(batch):
        images, ids, *where = (x.to(t.device, non_blocking=True) for x in batch)
        with torch.no_grad():
            latents = vae.encode(images).latent_dist.mode() * scale
        eps = torch.randn_like(latents)
        steps = timesteps(t, len(latents))
        with torch.set_grad_enabled(not frozen):
            states = text_encoder(ids)[0]
        predicted = forward(noise.add_noise(latents, eps, steps), steps, encoder_hidden_states=states).sample
        if weights is None:
            loss = F.mse_loss(predicted, eps)
        else:
            loss = (F.mse_loss(predicted, eps, reduction="none").mean((1, 2, 3)) * weights[steps]).mean()
        if maps is None:
            return loss
        grounded = grounding.loss(maps, *where)
        maps.clear()
        ramp = min(1.0, t.step / max(1.0, Schedule.RAMP * s.diffusion_steps))
        return torch.stack([loss + s.grounding * ramp * grounded, grounded])

    def evaluate():
        return accuracy(sampler(unet, text_encoder, vae, ema, scale, t.device, s.spacing), t.run)

    losses = t.fit(Loop("diffusion", s.diffusion_steps, grounding.batch if maps is not None else diffusion_batch,
                        s.batch, loss_of, {"unet": unet} | ({} if frozen else {"text_encoder": text_encoder}), ema,
                        evaluate))
    ema.copy_to(unet.parameters())
    if maps is None:
        return {"diffusion": losses}
    rows = cast(list[list[float]], losses)  # loss_of's (loss, grounded) per step
    return {"diffusion": [row[0] for row in rows], "grounding": [row[1] for row in rows]}


def train_clip(t: Trainer, model) -> list[float]:
    """Image-to-text over the captions and their negatives, text-to-image over the captions."""
    mean, std = (torch.tensor(v, device=t.device).view(1, 3, 1, 1) for v in (OPENAI_DATASET_MEAN, OPENAI_DATASET_STD))

    def loss_of(batch):
        images, ids = (x.to(t.device, non_blocking=True) for x in batch)
        image = model.encode_image(((images + 1) / 2 - mean) / std, normalize=True)
        text = model.encode_text(ids, normalize=True)
        logits = model.logit_scale.exp() * image @ text.T
        target = torch.arange(len(images), device=t.device)
        return (F.cross_entropy(logits, target) + F.cross_entropy(logits[:, :len(images)].T, target)) / 2

    return t.fit(Loop("clip", t.schedule.clip_steps, clip_batch, 4 * t.schedule.batch, loss_of, {"clip": model}))


def train_lm(t: Trainer, name: str, model, tokenizer) -> list[float]:
    collate = DataCollatorForLanguageModeling(tokenizer, mlm=name == "mlm", return_tensors="pt")

    def loss_of(texts):
        batch = collate([tokenizer(text) for text in texts])
        return model(**{k: v.to(t.device) for k, v in batch.items()}).loss

    return t.fit(Loop(name, t.schedule.lm_steps, caption_batch, t.schedule.batch, loss_of, {name: model}))


# ---- a run ----

def train(out: Path, schedule: Schedule, run: Run = Run()) -> dict:  # noqa: B008 (a frozen dataclass)
    """Train the models `run.only` names (copying the others from `run.reuse`) and write their compact weights, the
    LMs' vocabulary and `train.json` to `out`, built in its staging folder and swapped in whole (`folders`); returns
    the record. The checkpoint goes with the staging folder."""
    reused = folders.reused_record(out, schedule, run)
    check_steps(schedule, run.only)
    with folders.staged(out) as staging:
        record = _train(staging, schedule, run, reused)
    return record


def _train(out: Path, schedule: Schedule, run: Run, reused: dict | None) -> dict:
    torch.manual_seed(schedule.seed)
    ids = token_ids(random.Random(schedule.seed))
    losses: dict[str, list[float]] = {}
    with progress_bar(run.progress) as progress:
        t = Trainer(out, schedule, run, progress)
        record: dict = {"schedule": asdict(schedule), "torch": torch.__version__, "device": str(t.device),
                        "compile_unet": run.compile_unet, "seconds": t.seconds}
        unet, vae, text_encoder = (m.to(t.device) for m in models.diffusion_modules(schedule.attention_heads))
        if "vae" in run.only:
            losses["vae"], record["scaling_factor"] = train_vae(t, vae)
        else:
            vae.load_state_dict(models.full(models.load(run.reuse / "diffusion.safetensors")["vae"]))
            assert reused is not None  # the VAE is reused: some model is
            record["scaling_factor"] = reused["scaling_factor"]
        if "diffusion" in run.only:
            if schedule.parse_steps:
                losses["parse"], record["parse_accuracy"] = train_parse(t, text_encoder)
            losses |= train_diffusion(t, unet, text_encoder, vae, record["scaling_factor"])
            models.save(out / "diffusion.safetensors", {
                "unet": models.half(unet.state_dict()), "vae": models.half(vae.state_dict()),
                "text_encoder": models.compact(text_encoder.state_dict(), models.EMBEDDINGS["text_encoder"], ids)})
            if run.eval_scenes:
                record["accuracy"] = {"scenes": run.eval_scenes, "steps": run.eval_steps,
                                      "guidance": run.eval_guidance, "curve": t.curves["diffusion"]}
        if "clip" in run.only:
            clip = models.clip_model().to(t.device)
            losses["clip"] = train_clip(t, clip)
            models.save(out / "clip.safetensors", {
                "clip": models.compact(clip.state_dict(), models.EMBEDDINGS["clip"], ids)})
        if "lms" in run.only:
            train_lms(t, out, losses)
    written = {path for model in run.only for path in folders.FILES[model]}
    for path in sorted({p for m in Schedule.MODELS if m not in run.only for p in folders.FILES[m]} - written):
        (shutil.copytree if (run.reuse / path).is_dir() else shutil.copyfile)(run.reuse / path, out / path)
    if reused is not None:
        record["reused"] = {"from": str(run.reuse), "models": [m for m in Schedule.MODELS if m not in run.only]}
    record["losses_per_50_steps"] = {name: [round(float(np.mean(l[i:i + 50])), 5) for i in range(0, len(l), 50)]
                                     for name, l in losses.items()}
    record = finite(record)  # what train.json holds (a loss that was NaN, as a tiny run's masked LM can, is null)
    (out / "train.json").write_text(json_text(record, indent=1))
    t.checkpoints.remove()
    return record


def train_lms(t: Trainer, out: Path, losses: dict[str, list[float]]) -> None:
    """The world vocabulary (`out/vocab`) and the masked and causal LMs on it."""
    vocab, merges = train_vocab([world.caption(world.sample(t.rng)[0]) for _ in range(2000)], out / "vocab", 1000)
    with tempfile.TemporaryDirectory() as scratch:
        for name, build, cls, shape in models.LMS:
            folder = Path(scratch) / name
            build(vocab, merges, folder, models.LM_MAX_LENGTH, **shape)
            model = cls.from_pretrained(folder).train().to(t.device)
            losses[name] = train_lm(t, name, model, AutoTokenizer.from_pretrained(folder))
            models.save(out / f"{name}.safetensors", {name: models.separate(model.state_dict())})
