"""The miniature models: the trainer trains (its losses fall), and the committed weights, loaded by the pipeline's own
loaders, draw what their captions say and keep a pair's shared objects in place through attention sharing."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from tasks.core.specs import ModelSpec
from tasks.image import p2p
from tasks.image.sampling import Sample, encode_prompts, load_diffusion, render
from tasks.toyworld import truth, world
from tasks.toyworld.assemble import assemble
from tasks.toyworld.params import Schedule
from tasks.toyworld.train import train
from tests.conftest import ROOT

WEIGHTS = ROOT / "tasks" / "toyworld" / "weights"
STEPS, SIZE = 20, 32
ACCURACY_FLOOR = 0.5  # the committed weights measured ... (README, "The toy world")


def test_a_short_training_run_lowers_every_loss(tmp_path):
    record = train(tmp_path, Schedule(vae_steps=60, diffusion_steps=60, clip_steps=30, lm_steps=60, batch=8))
    for name, losses in record["losses_per_50_steps"].items():
        assert losses[-1] < losses[0], (name, losses)
    assert {"diffusion.safetensors", "clip.safetensors", "mlm.safetensors", "clm.safetensors", "train.json"} <= {
        p.name for p in tmp_path.iterdir()}


@pytest.fixture(scope="module")
def diffusion(tmp_path_factory):
    out = tmp_path_factory.mktemp("toyworld")
    assemble(WEIGHTS, out)
    return load_diffusion(ModelSpec(id=str(out / "diffusion")), None)


def edited_pairs(n: int) -> list[tuple[str, str]]:
    """(C_o, C_c) of `n` world scenes, C_c with the first phrase's shape changed (a noun edit)."""
    rng, pairs = random.Random(7), []
    while len(pairs) < n:
        spec, _ = world.sample(rng)
        shape = rng.choice([s for s in world.SHAPES if s != spec.phrases[0].shape])
        pairs.append((world.caption(spec), world.caption(world.with_phrase(spec, 0, shape=shape))))
    return pairs


def rendered(diffusion, pairs, p2p_fraction: float) -> list[tuple[bool, bool]]:
    out = []
    for i, (caption, counterfactual) in enumerate(pairs):
        images = render(diffusion, encode_prompts(diffusion, caption, counterfactual),
                        [Sample(1000 + i, p2p_fraction, 7.5)], STEPS, SIZE).images[0]
        out.append(truth.judge_pair(*images, caption, counterfactual))
    return out


def test_committed_weights_follow_their_captions(diffusion):
    """Each caption drawn alone (C_o = C_c, no sharing) and read back by the checker."""
    captions = [c for c, _ in edited_pairs(48)]
    shown = [truth.judge_pair(*render(diffusion, encode_prompts(diffusion, c, c), [Sample(i, 0.0, 7.5)], STEPS,
                                      SIZE).images[0], c, c)[0] for i, c in enumerate(captions)]
    assert np.mean(shown) >= ACCURACY_FLOOR, np.mean(shown)


def test_sharing_the_wrong_rows_lowers_minimality(diffusion, monkeypatch):
    pairs = edited_pairs(24)
    right = np.mean([m for _, m in rendered(diffusion, pairs, 0.8)])

    def wrong_rows(query: torch.Tensor, key: torch.Tensor, shared: torch.Tensor):
        """The mutant: a c row takes the o row of the other guidance half (unconditional <-> conditional)."""
        q, k = (x.unflatten(0, (-1, 2)) for x in (query, key))
        donor_q, donor_k = q[:, 0].roll(1, 0), k[:, 0].roll(1, 0)
        mask = shared.view(-1, *([1] * (query.ndim - 1)))
        return (torch.stack([q[:, 0], torch.where(mask, donor_q, q[:, 1])], 1).flatten(0, 1),
                torch.stack([k[:, 0], torch.where(mask, donor_k, k[:, 1])], 1).flatten(0, 1))

    monkeypatch.setattr(p2p, "share_maps", wrong_rows)
    mutant = np.mean([m for _, m in rendered(diffusion, pairs, 0.8)])
    assert mutant < right, (mutant, right)

