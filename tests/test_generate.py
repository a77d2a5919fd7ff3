"""Paired sampling and over-generation on tiny random models (CPU fp32, 32x32, 3 steps)."""

from __future__ import annotations

import dataclasses

import diffusers.schedulers.scheduling_euler_ancestral_discrete as euler_module
import numpy as np
import polars as pl
import pytest
import torch

from tasks import filter as clip_filter
from tasks import generate, image_store, sampling
from tasks.params import FilterParams
from tasks.sampling import Sample, encode_prompts, render
from tests.image_fixtures import PAIRS, make_params

pytest_plugins = ["tests.image_fixtures"]

PASS_ALL = FilterParams(min_text_image_o=-1, min_text_image_c=-1, min_image_image=-1, min_clip_dir=-1)
PASS_NONE = FilterParams(min_clip_dir=1.5)
SAMPLES = [Sample(101, 0.3, 7.5), Sample(202, 0.7, 15.0), Sample(303, 0.5, 10.0)]


def test_both_images_get_the_same_initial_latent_and_noise(tiny_params, image_models, monkeypatch):
    draws = []

    def recording(module):
        original = module.randn_tensor

        def randn_tensor(*args, **kwargs):
            draws.append(original(*args, **kwargs))
            return draws[-1]
        monkeypatch.setattr(module, "randn_tensor", randn_tensor)

    recording(sampling)
    recording(euler_module)
    prompts = encode_prompts(image_models.diffusion, "a dog on a couch", "a cat on a couch")
    rendered = render(image_models.diffusion, prompts, SAMPLES, 3, tiny_params.size, "self")
    assert len(draws) == 1 + 3  # initial latent + one ancestral draw per step
    for noise in draws:
        assert torch.equal(noise[0::2], noise[1::2])  # o row == c row, per sample
        assert not torch.equal(noise[0], noise[2]) and not torch.equal(noise[2], noise[4])  # seeds differ
    assert not np.array_equal(rendered.images[:, 0], rendered.images[:, 1])  # the captions still matter


def test_identical_captions_give_identical_images_and_o_ignores_counterfactual(tiny_params, image_models):
    diffusion = image_models.diffusion
    same = render(diffusion, encode_prompts(diffusion, "a dog", "a dog"), SAMPLES, 3, tiny_params.size, "self")
    assert np.array_equal(same.images[:, 0], same.images[:, 1])
    cat = render(diffusion, encode_prompts(diffusion, "a dog", "a cat"), SAMPLES, 3, tiny_params.size, "self")
    car = render(diffusion, encode_prompts(diffusion, "a dog", "a car"), SAMPLES, 3, tiny_params.size, "self")
    assert np.array_equal(cat.images[:, 0], car.images[:, 0])
    assert not np.array_equal(cat.images[:, 1], car.images[:, 1])


def test_seeds_are_hashed_deterministically_and_draws_stay_in_range(tiny_params):
    seeds = {sampling.sample_seed(0, cid, i) for cid in ("p0", "p1") for i in range(50)}
    assert len(seeds) == 100 and all(0 <= s < 2 ** 63 for s in seeds)
    assert sampling.sample_seed(0, "p0", 3) == sampling.sample_seed(0, "p0", 3) != sampling.sample_seed(1, "p0", 3)
    plans = [sampling.plan_sample(tiny_params, "p0", i) for i in range(50)]
    assert all(7.5 <= s.guidance_scale <= 15 and 0.1 <= s.p2p_fraction <= 0.9 for s in plans)
    assert len({s.p2p_fraction for s in plans}) == 50


def test_rerun_with_the_same_seed_is_identical(tiny_params, image_models, generated, tmp_path):
    scores, root = generated
    again, _ = generate.run(PAIRS, tiny_params, image_models, tmp_path)
    assert again.equals(scores)
    stored = scores.filter(pl.col("image_o").is_not_null())
    assert stored.height == 2  # top_k_images=1 per pair
    for name in stored["image_o"].to_list() + stored["image_c"].to_list():
        assert (root / name).read_bytes() == (tmp_path / name).read_bytes()
    assert scores.height == 8 and scores["unet_evals"].sum() == 8 * 4 * 3 + 2 * 4 * 3  # + top-1 re-render per pair


def test_regenerating_an_unsaved_selected_sample_is_pixel_identical(tiny_specs, image_models, tmp_path):
    params = make_params(tiny_specs, top_k_images=0, n_samples=3)  # batches of 2 + 1 samples; nothing stored
    scores, _ = generate.run(PAIRS.head(1), params, image_models, tmp_path / "none")
    assert scores["image_o"].null_count() == 3 and not (tmp_path / "none").exists()
    selected, _ = clip_filter.run(scores, PASS_ALL)
    assert selected["needs_regeneration"].to_list() == [True]
    # a run that stores every sample (each re-rendered alone: the canonical path) vs regenerating each sample
    keep_all = make_params(tiny_specs, top_k_images=3, n_samples=3)
    stored, _ = generate.run(PAIRS.head(1), keep_all, image_models, tmp_path / "all")
    for row in [selected.row(0, named=True), *scores.iter_rows(named=True)]:
        path_o, path_c = generate.regenerate(row, params, image_models, tmp_path / "regen")
        kept = stored.filter(pl.col("sample") == row["sample"]).row(0, named=True)
        assert path_o.read_bytes() == (tmp_path / "all" / kept["image_o"]).read_bytes()
        assert path_c.read_bytes() == (tmp_path / "all" / kept["image_c"]).read_bytes()
        assert not np.array_equal(image_store.read_png(path_o), image_store.read_png(path_c))


def test_overlong_prompt_is_truncated_and_flagged(tiny_specs, image_models, tmp_path):
    long = "a dog " + "with a very long tail and " * 20 + "a hat"
    prompts = encode_prompts(image_models.diffusion, long, "a cat")
    assert prompts.truncated == (True, False) and prompts.token_counts[0] > 77
    longer = encode_prompts(image_models.diffusion, long + " and more words", "a cat")
    assert torch.equal(prompts.states, longer.states)  # only the first 77 tokens reach the text encoder
    pairs = pl.DataFrame({"caption_id": ["x"], "image_id": ["y"], "caption": [long], "counterfactual": ["a cat"]})
    scores, _ = generate.run(pairs, make_params(tiny_specs, n_samples=1), image_models, tmp_path)
    assert scores.select("truncated_o", "truncated_c", "tokens_misaligned").row(0) == (True, False, True)


class CorruptingVAE:
    """Decodes normally, then (first call only) turns decoded row 0 into NaN and rows 2, 3 into black."""

    def __init__(self, vae):
        self.vae, self.calls = vae, 0

    def decode(self, latents):
        out = self.vae.decode(latents)
        self.calls += 1
        if self.calls == 1:
            out.sample[0, 0, 0, 0] = float("nan")
            out.sample[2:4] = -1.0
        return out


def test_nan_and_black_images_are_rejected_with_reasons(tiny_specs, image_models, tmp_path):
    params = make_params(tiny_specs, n_samples=3, batch_samples=3, top_k_images=3)
    models = dataclasses.replace(image_models, diffusion=dataclasses.replace(
        image_models.diffusion, vae=CorruptingVAE(image_models.diffusion.vae)))
    scores, rejects = generate.run(PAIRS.head(1), params, models, tmp_path)
    by_sample = scores.sort("sample")
    assert by_sample["reject_reason"].to_list() == ["nan_image", "black_image", None]
    assert by_sample["nan"].to_list() == [True, False, False]
    assert by_sample["clip_dir"].is_null().to_list() == [True, True, False]
    assert by_sample["image_o"].is_null().to_list() == [True, True, False]  # rejected samples are never stored
    assert rejects.select("sample", "stage", "reason").rows() == [(0, "generate", "nan_image"),
                                                                    (1, "generate", "black_image")]
    selected, _ = clip_filter.run(scores, PASS_ALL)
    assert selected["sample"].to_list() == [2]


class FlakyUNet:
    """The real UNet, except that its first call raises CUDA OOM; records every call's batch rows."""

    def __init__(self, unet):
        self.unet, self.rows = unet, []

    def __call__(self, x, *args, **kwargs):
        self.rows.append(x.shape[0])
        if len(self.rows) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return self.unet(x, *args, **kwargs)


def test_cuda_oom_halves_the_batch_and_retries(tiny_specs, image_models, tmp_path, caplog):
    flaky = FlakyUNet(image_models.diffusion.unet)
    models = dataclasses.replace(image_models, diffusion=dataclasses.replace(image_models.diffusion, unet=flaky))
    params = make_params(tiny_specs, n_samples=4, batch_samples=4, top_k_images=0)
    scores, _ = generate.run(PAIRS.head(1), params, models, tmp_path)
    assert flaky.rows == [16] + [8] * 6  # 4 samples x 4 rows failed; then two batches of 2 samples x 3 steps
    assert "batch_samples halved to 2" in caplog.text
    halved, _ = generate.run(PAIRS.head(1), make_params(tiny_specs, n_samples=4, batch_samples=2, top_k_images=0),
                             image_models, tmp_path)
    assert scores.equals(halved)


class CountingUNet:
    def __init__(self, unet):
        self.unet, self.rows = unet, 0

    def __call__(self, x, *args, **kwargs):
        self.rows += x.shape[0]
        return self.unet(x, *args, **kwargs)


@pytest.mark.parametrize(("filter_params", "enabled", "per_pair"), [
    (PASS_ALL, True, 2), (PASS_NONE, True, 6), (PASS_ALL, False, 6)])
def test_adaptive_mode_stops_a_pair_once_enough_samples_pass(tiny_specs, image_models, tmp_path, filter_params,
                                                             enabled, per_pair):
    counting = CountingUNet(image_models.diffusion.unet)
    models = dataclasses.replace(image_models, diffusion=dataclasses.replace(image_models.diffusion, unet=counting))
    params = make_params(tiny_specs, n_samples=6, batch_samples=2, top_k_images=0,
                         adaptive={"enabled": enabled, "min_accepted": 1, "round_samples": 2})
    scores, _ = generate.run(PAIRS, params, models, tmp_path, filter_params=filter_params)
    assert scores.group_by("caption_id").len()["len"].to_list() == [per_pair, per_pair]
    assert scores["unet_evals"].sum() == counting.rows == 2 * per_pair * 4 * params.steps
