"""The cost model against the code it models: adaptive over-generation's expected samples against the real
`generate.pair_rows` loop, and wall time on K workers."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from tasks.image import generate
from tasks.plan import estimate
from tests.conftest import project_params
from tests.image.fixtures import make_params

pytest_plugins = ["tests.image.fixtures"]

PASSING = {"sim_text_image_o": 0.9, "sim_text_image_c": 0.9, "sim_image_image": 0.9, "clip_dir": 0.9,
           "subject_margin_o": 0.5, "subject_margin_c": 0.5}


class DrawnScreening:
    """A `generate.Screening` whose samples pass selection with probability `pass_rate`, drawn per sample."""

    def __init__(self, params, pass_rate: float, seed: int) -> None:
        self.params, self.pass_rate, self.rng, self.rendered = params, pass_rate, random.Random(seed), 0

    def measure(self, pair: dict, indices: range) -> list[dict]:
        self.rendered += len(indices)
        return [{"sample": i, "seed": i, "p2p_fraction": 0.5, "guidance_scale": 7.5, "nan": False, "max_pixel_o": 255,
                 "max_pixel_c": 255, **PASSING,
                 **({} if self.rng.random() < self.pass_rate else {"clip_dir": -0.5})} for i in indices]


@pytest.mark.parametrize(("n_samples", "round_samples", "min_accepted", "pass_rate"),
                         [(12, 3, 1, 0.2), (12, 5, 2, 0.3), (10, 10, 1, 0.5), (7, 2, 3, 0.05)])
def test_expected_samples_match_the_adaptive_loop(tiny_specs, n_samples, round_samples, min_accepted, pass_rate):
    from tests.image.fixtures import PAIRS

    params = make_params(tiny_specs, n_samples=n_samples,
                         adaptive={"enabled": True, "round_samples": round_samples, "min_accepted": min_accepted})
    selection = project_params("profile=paper").selection  # clip_dir >= 0.2: a drawn failure fails it
    pair, pairs = PAIRS.row(0, named=True), 2000
    screening = DrawnScreening(params, pass_rate, seed=0)
    for _ in range(pairs):
        generate.pair_rows(pair, screening, selection)
    expected = estimate.expected_samples(params, pass_rate, adaptive=True)
    assert screening.rendered / pairs == pytest.approx(expected, abs=0.2)
    assert expected <= n_samples == estimate.expected_samples(params, pass_rate, adaptive=False)


def measured(**changes) -> estimate.Measured:
    return replace(estimate.Measured(
        captions=1000, sample_captions=100, sample_pairs=70, caption_seconds=10.0, caption_load_seconds=2.0,
        sample_seconds=0.5, canonical_seconds=0.6, image_load_seconds=3.0,
        startup_seconds={"generate": 5.0, "selection": 4.0}, pass_rate=0.1, record_bytes=500.0, png_bytes=1000.0),
        **changes)


def test_the_estimate_scales_the_sample_and_spreads_tasks_over_workers(tiny_specs):
    params = make_params(tiny_specs, n_samples=20, steps=50, pairs_per_task=10,
                         adaptive={"enabled": True, "round_samples": 5, "min_accepted": 1})
    off = estimate.estimate(measured(), params, 1, 64, adaptive=False)
    assert off.pairs == 700 and off.samples == 700 * 20
    assert off.accepted == pytest.approx(700 * (1 - 0.9**20))
    assert off.unet_rows == pytest.approx((off.samples + off.accepted) * 4 * 50)
    assert off.gpu_hours == pytest.approx((off.samples * 0.5 + off.accepted * 0.6) / 3600)
    on = estimate.estimate(measured(), params, 1, 64, adaptive=True)
    assert on.samples < off.samples and on.accepted == off.accepted and on.gpu_hours < off.gpu_hours
    fixed = 5.0 + 4.0 + 2 * 3.0
    walls = {k: estimate.estimate(measured(), params, k, 64, adaptive=False).image_wall_seconds - fixed
             for k in (1, 2, 70, 1000)}
    selection_tasks = math.ceil(off.accepted / 10)  # 62 (and 70 generate tasks): both halve on 2 workers
    assert walls[2] == pytest.approx(walls[1] / 2)
    assert walls[70] == walls[1000] == pytest.approx(10 * 20 * 0.5 + off.accepted / selection_tasks * 0.6)
    assert off.wall_seconds == off.caption_wall_seconds + off.image_wall_seconds
