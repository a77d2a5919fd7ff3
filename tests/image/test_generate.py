"""Paired sampling and over-generation on tiny random models (CPU fp32, 32x32, 3 steps)."""

from __future__ import annotations

import dataclasses
import logging

import diffusers.schedulers.scheduling_euler_ancestral_discrete as euler_module
import numpy as np
import polars as pl
import pytest
import torch

from tasks.core.schemas import SCORE_COLUMNS
from tasks.image import render, sampling, thresholds
from tasks.image.params import SelectionParams
from tasks.image.records import PairRecords
from tasks.image.sampling import Sample, plan_sample
from tasks.stages import stage
from tests.image.fixtures import PAIRS, PASS_ALL, make_params, screen

pytest_plugins = ["tests.image.fixtures"]

PASS_NONE = SelectionParams(min_clip_dir=1.0, min_image_image=1.0)
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
    recording(euler_module)  # the scheduler draws nothing: every draw is made up front, in its order
    prompts = image_models.diffusion.encode("a dog on a couch", "a cat on a couch")
    rendered = sampling.render(image_models.diffusion, prompts, SAMPLES, 3, tiny_params.size)
    assert len(draws) == 1 + 3  # initial latent + one ancestral draw per step
    for noise in draws:
        assert torch.equal(noise[0::2], noise[1::2])  # o row == c row, per sample
        assert not torch.equal(noise[0], noise[2]) and not torch.equal(noise[2], noise[4])  # seeds differ
    assert not np.array_equal(rendered.images[:, 0], rendered.images[:, 1])  # the captions still matter


def test_identical_captions_give_identical_images_and_o_ignores_counterfactual(tiny_params, image_models):
    diffusion = image_models.diffusion
    same = sampling.render(diffusion, diffusion.encode("a dog", "a dog"), SAMPLES, 3, tiny_params.size)
    assert np.array_equal(same.images[:, 0], same.images[:, 1])
    cat = sampling.render(diffusion, diffusion.encode("a dog", "a cat"), SAMPLES, 3, tiny_params.size)
    car = sampling.render(diffusion, diffusion.encode("a dog", "a car"), SAMPLES, 3, tiny_params.size)
    assert np.array_equal(cat.images[:, 0], car.images[:, 0])
    assert not np.array_equal(cat.images[:, 1], car.images[:, 1])


def test_seeds_are_hashed_deterministically_and_draws_stay_in_range(tiny_params):
    seeds = {sampling.sample_seed(0, cid, i) for cid in ("p0", "p1") for i in range(50)}
    assert len(seeds) == 100 and all(0 <= s < 2 ** 63 for s in seeds)
    assert sampling.sample_seed(0, "p0", 3) == sampling.sample_seed(0, "p0", 3) != sampling.sample_seed(1, "p0", 3)
    plans = [sampling.plan_sample(tiny_params, "p0", i) for i in range(50)]
    assert all(7.5 <= s.guidance_scale <= 15 and 0.1 <= s.p2p_fraction <= 0.9 for s in plans)
    assert len({s.p2p_fraction for s in plans}) == 50


def test_rerun_with_the_same_seed_is_identical_and_cached_samples_are_not_rendered(tmp_path, tiny_params, image_models,
                                                                                    generated):
    cache = PairRecords(tmp_path)
    first, _, rendered = screen(PAIRS, tiny_params, image_models, cache)
    again, _, rerendered = screen(PAIRS, tiny_params, image_models, cache)
    assert first.equals(generated) and again.equals(generated)
    assert (rendered, rerendered) == (8, 0)
    assert generated.height == 8 and generated["unet_evals"].sum() == 8 * 4 * 3


def test_n_samples_up_renders_only_the_new_samples_and_down_renders_nothing(tmp_path, tiny_specs, image_models):
    cache = PairRecords(tmp_path)
    four, _, r4 = screen(PAIRS, make_params(tiny_specs, n_samples=4), image_models, cache)
    six, _, r6 = screen(PAIRS, make_params(tiny_specs, n_samples=6), image_models, cache)
    back, _, r4b = screen(PAIRS, make_params(tiny_specs, n_samples=4), image_models, cache)
    assert (r4, r6, r4b) == (8, 4, 0)
    assert six.filter(pl.col("sample") < 4).equals(four) and back.equals(four)


def test_batch_sizes_and_black_threshold_never_render_again(tmp_path, tiny_specs, image_models):
    cache = PairRecords(tmp_path)
    base, _, _ = screen(PAIRS, make_params(tiny_specs), image_models, cache)
    for change in ({"batch_samples": 1}, {"batch_samples": 4}, {"clip_batch_size": 1}, {"black_threshold": 255}):
        again, _, rendered = screen(PAIRS, make_params(tiny_specs, **change), image_models, cache)
        assert rendered == 0, change
    assert again["reject_reason"].to_list() == ["black_image"] * 8  # applied to the cached measurements
    assert again.drop("reject_reason").equals(base.drop("reject_reason"))
    _, _, rendered = screen(PAIRS, make_params(tiny_specs, steps=2), image_models, cache)
    assert rendered == 8  # steps change the pixels: every sample again


def test_channels_last_renders_the_same_images_and_gpu_path_knobs_are_keyed(tmp_path, tiny_specs, image_models):
    """channels_last changes kernels, not the method: same pixels within rounding; but it and the compile mode are in
    the sample key, so a sample rendered one way is never served as the other (compiled pixels:
    test_render_loop)."""
    base, changed = make_params(tiny_specs, n_samples=2), make_params(tiny_specs, n_samples=2, channels_last=True)
    models = render.load_models(changed)
    assert models.diffusion.unet.conv_in.weight.is_contiguous(memory_format=torch.channels_last)
    cache = PairRecords(tmp_path)
    stock, _, _ = screen(PAIRS.head(1), base, image_models, cache)
    fast, _, rendered = screen(PAIRS.head(1), changed, models, cache)
    assert rendered == 2
    for column in ("max_pixel_o", "max_pixel_c"):
        assert (fast[column] - stock[column]).abs().max() <= 1
    for column in SCORE_COLUMNS:
        assert fast[column].to_list() == pytest.approx(stock[column].to_list(), abs=1e-2)  # pixels +-1
    compiled = make_params(tiny_specs, compile_unet="default")
    assert len({render.sample_unit(p, stage("generate").code).shared for p in (base, changed, compiled)}) == 3


def test_a_canonical_render_is_reproducible_and_is_a_batch_of_one(tiny_specs, image_models):
    params = make_params(tiny_specs, n_samples=3, batch_samples=1)
    alone, _, _ = screen(PAIRS.head(1), params, image_models)
    pair = PAIRS.row(0, named=True)
    for row in alone.iter_rows(named=True):
        sample = Sample(row["seed"], row["p2p_fraction"], row["guidance_scale"])
        first = render.canonical(pair, sample, params, image_models)
        second = render.canonical(pair, sample, params, image_models)
        assert np.array_equal(first["images"], second["images"])
        assert not np.array_equal(first["images"][0], first["images"][1])
        assert all(first[name] == row[name] for name in SCORE_COLUMNS)  # screening alone == canonical
        assert first["max_pixel_o"] == row["max_pixel_o"] == int(first["images"][0].max())


def test_concurrent_renders_on_shared_models_equal_sequential_ones(tiny_params, image_models):
    """Two threads render on one UNet (a Dask worker's threads): batches of 3 and 1 samples with other
    p2p fractions, many times over; each equals its render alone."""
    from concurrent.futures import ThreadPoolExecutor

    diffusion = image_models.diffusion
    jobs = [(diffusion.encode("a dog on a couch", "a cat on a couch"), SAMPLES),
            (diffusion.encode("a red car on a street", "a red bus on a street"), [Sample(7, 0.9, 9.0)])]

    def run(job):
        return sampling.render(diffusion, *job, 3, tiny_params.size).images

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CPU float results depend on how an op is split across threads, busy or not
    try:
        alone = [run(job) for job in jobs]
        with ThreadPoolExecutor(2) as pool:
            together = list(pool.map(run, jobs * 4))
    finally:
        torch.set_num_threads(threads)
    for i, images in enumerate(together):
        assert np.array_equal(images, alone[i % 2])


def test_overlong_prompt_is_truncated_and_flagged(tiny_specs, image_models):
    long = "a dog " + "with a very long tail and " * 20 + "a hat"
    prompts = image_models.diffusion.encode(long, "a cat")
    assert prompts.truncated == (True, False) and prompts.token_counts[0] > 77
    longer = image_models.diffusion.encode(long + " and more words", "a cat")
    assert torch.equal(prompts.states, longer.states)  # only the first 77 tokens reach the text encoder
    pairs = pl.DataFrame({"caption_id": ["x"], "image_id": ["y"], "caption": [long], "counterfactual": ["a cat"],
                          "edit_type": ["noun"], "original_word": ["dog"], "substitute": ["cat"]})
    scores, _, _ = screen(pairs, make_params(tiny_specs, n_samples=1), image_models)
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


def test_nan_and_black_images_are_rejected_with_reasons(tiny_specs, image_models):
    params = make_params(tiny_specs, n_samples=3, batch_samples=3)
    models = dataclasses.replace(image_models, diffusion=dataclasses.replace(
        image_models.diffusion, vae=CorruptingVAE(image_models.diffusion.vae)))
    scores, rejects, _ = screen(PAIRS.head(1), params, models)
    by_sample = scores.sort("sample")
    assert by_sample["reject_reason"].to_list() == ["nan_image", "black_image", None]
    assert by_sample["nan"].to_list() == [True, False, False]
    assert by_sample["clip_dir"].is_null().to_list() == [True, False, False]  # black is measured, NaN is not
    assert by_sample["max_pixel_o"].to_list()[1] == by_sample["max_pixel_c"].to_list()[1] == 0
    assert rejects.select("sample", "stage", "reason").rows() == [(0, "generate", "nan_image"),
                                                                    (1, "generate", "black_image")]
    assert thresholds.ranked(scores, PASS_ALL)["sample"].to_list() == [2]


class FlakyUNet:
    """The real UNet, except that its first call raises CUDA OOM; records every call's batch rows."""

    def __init__(self, unet):
        self.unet, self.rows = unet, []

    def __call__(self, x, *args, **kwargs):
        self.rows.append(x.shape[0])
        if len(self.rows) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return self.unet(x, *args, **kwargs)


def test_cuda_oom_halves_the_batch_and_retries(tiny_specs, image_models, caplog):
    flaky = FlakyUNet(image_models.diffusion.unet)
    models = dataclasses.replace(image_models, diffusion=dataclasses.replace(image_models.diffusion, unet=flaky))
    params = make_params(tiny_specs, n_samples=4, batch_samples=4)
    render.batcher.cache_clear()
    try:
        scores, _, _ = screen(PAIRS.head(1), params, models)
        assert flaky.rows == [16] + [8] * 6  # 4 samples x 4 rows failed; then two batches of 2 samples x 3 steps
        assert "batch_samples halved to 2" in caplog.text
        screen(PAIRS.slice(1, 1), params, models)  # the next pair (a new Screening) starts at the size that fit
        assert flaky.rows[7:] == [8] * 6
    finally:
        render.batcher.cache_clear()
    halved, _, _ = screen(PAIRS.head(1), make_params(tiny_specs, n_samples=4, batch_samples=2), image_models)
    assert scores.equals(halved)


class CountingUNet:
    def __init__(self, unet):
        self.unet, self.rows = unet, 0

    def __call__(self, x, *args, **kwargs):
        self.rows += x.shape[0]
        return self.unet(x, *args, **kwargs)


@pytest.mark.parametrize(("selection_params", "enabled", "per_pair"), [
    (PASS_ALL, True, 2), (PASS_NONE, True, 6), (PASS_ALL, False, 6)])
def test_adaptive_mode_stops_a_pair_once_enough_samples_pass(tiny_specs, image_models, selection_params,
                                                             enabled, per_pair):
    counting = CountingUNet(image_models.diffusion.unet)
    models = dataclasses.replace(image_models, diffusion=dataclasses.replace(image_models.diffusion, unet=counting))
    params = make_params(tiny_specs, n_samples=6, batch_samples=2,
                         adaptive={"enabled": enabled, "min_accepted": 1, "round_samples": 2})
    scores, _, _ = screen(PAIRS, params, models, selection_params=selection_params)
    assert scores.group_by("caption_id").len()["len"].to_list() == [per_pair, per_pair]
    assert scores["unet_evals"].sum() == counting.rows == 2 * per_pair * 4 * params.steps


def test_subject_margins_are_the_clip_prompt_differences_of_a_noun_swap_only(tiny_specs, image_models):
    params = make_params(tiny_specs, n_samples=1)
    pairs = pl.concat([PAIRS.head(1), PAIRS.head(1).with_columns(
        caption_id=pl.lit("d0"), edit_type=pl.lit("delete"), original_word=pl.lit(" on a couch"),
        substitute=pl.lit(""), counterfactual=pl.lit("a dog sitting"))])
    scores, _, _ = screen(pairs, params, image_models)
    noun, delete = scores.row(0, named=True), scores.row(1, named=True)
    assert delete["subject_margin_o"] is None and delete["subject_margin_c"] is None
    pair = PAIRS.row(0, named=True)
    rendered = render.canonical(pair, plan_sample(params, "p0", 0), params, image_models)
    image_o, image_c = image_models.clip.embed_images(list(rendered["images"]), 2)
    original, substitute = image_models.clip.embed_texts(["a photo of a dog", "a photo of a cat"], 8)
    assert rendered["subject_margin_o"] == pytest.approx(float(image_o @ original - image_o @ substitute), abs=1e-5)
    assert rendered["subject_margin_c"] == pytest.approx(float(image_c @ substitute - image_c @ original), abs=1e-5)
    # The screening's batch gives the same margins as the canonical render, within kernel rounding.
    assert noun["subject_margin_o"] == pytest.approx(rendered["subject_margin_o"], abs=1e-3)


def test_the_subject_prompt_is_keyed_and_the_words_are_part_of_a_sample_key(tmp_path, tiny_specs, image_models):
    cache = PairRecords(tmp_path)
    screen(PAIRS.head(1), make_params(tiny_specs, n_samples=1), image_models, cache)
    _, _, rendered = screen(PAIRS.head(1), make_params(tiny_specs, n_samples=1, subject_prompt="an image of {word}"),
                            image_models, cache)
    assert rendered == 1
    renamed = PAIRS.head(1).with_columns(original_word=pl.lit("puppy"))
    _, _, rendered = screen(renamed, make_params(tiny_specs, n_samples=1), image_models, cache)
    assert rendered == 1


def test_a_compiled_unets_first_batch_logs_its_time_once(tiny_params, image_models, caplog):
    """The progress output shows what the first call of a compiled UNet cost (compiling included), once per process
    and sample unit; an eager UNet logs nothing."""
    compiled = dataclasses.replace(image_models.diffusion, compile_mode="reduce-overhead")
    prompts = compiled.encode("a dog on a couch", "a cat on a couch")
    with caplog.at_level(logging.INFO, logger="tasks.image.render"):
        for models in (image_models, dataclasses.replace(image_models, diffusion=compiled)):
            list(render.Batcher(2).render(models.diffusion, prompts, SAMPLES, tiny_params))
    lines = [r.getMessage() for r in caplog.records if "UNet compiled" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("UNet compiled (torch.compile reduce-overhead): first batch of 2 ")
