"""The cost model against the code it models: adaptive over-generation's expected samples against the real
`generate.pair_rows` loop, acceptance replayed pair by pair on a pilot's samples table against the true count, and
wall time on K workers."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import replace

import polars as pl
import pytest

from tasks.image import generate, thresholds
from tasks.plan import estimate
from tests.conftest import project_params
from tests.image.fixtures import PAIRS, make_params

pytest_plugins = ["tests.image.fixtures"]

PASSING = {"sim_text_image_o": 0.9, "sim_text_image_c": 0.9, "sim_image_image": 0.9, "clip_dir": 0.9,
           "subject_margin_o": 0.5, "subject_margin_c": 0.5}


class ScriptedScreening:
    """A `generate.Screening` whose sample i of a pair passes the paper's selection when `passes(caption_id, i)`."""

    def __init__(self, params, passes: Callable[[str, int], bool]) -> None:
        self.params, self.passes, self.rendered = params, passes, 0

    def measure(self, pair: dict, indices: range) -> list[dict]:
        self.rendered += len(indices)
        return [{"sample": i, "seed": i, "p2p_fraction": 0.5, "guidance_scale": 7.5, "nan": False, "max_pixel_o": 255,
                 "max_pixel_c": 255, **PASSING,
                 **({} if self.passes(pair["caption_id"], i) else {"clip_dir": -0.5})} for i in indices]


def drawn(params, pass_rate: float, seed: int) -> ScriptedScreening:
    """Samples passing with probability `pass_rate`, drawn per sample."""
    rng = random.Random(seed)
    return ScriptedScreening(params, lambda pair, i: rng.random() < pass_rate)


@pytest.mark.parametrize(("n_samples", "round_samples", "min_accepted", "pass_rate"),
                         [(12, 3, 1, 0.2), (12, 5, 2, 0.3), (10, 10, 1, 0.5), (7, 2, 3, 0.05)])
def test_expected_samples_match_the_adaptive_loop(tiny_specs, n_samples, round_samples, min_accepted, pass_rate):
    params = make_params(tiny_specs, n_samples=n_samples,
                         adaptive={"enabled": True, "round_samples": round_samples, "min_accepted": min_accepted})
    paper = project_params("profile=paper").selection  # clip_dir >= 0.2: a drawn failure fails it
    pair, pairs = PAIRS.row(0, named=True), 2000
    screening = drawn(params, pass_rate, seed=0)
    for _ in range(pairs):
        generate.pair_rows(pair, screening, paper)
    expected = estimate.pair_outlook((), pass_rate, params, adaptive=True)[0]
    assert screening.rendered / pairs == pytest.approx(expected, abs=0.2)
    assert expected <= n_samples == estimate.pair_outlook((), pass_rate, params, adaptive=False)[0]


@pytest.mark.parametrize("pass_rate", [0.0, 0.5, 1e-9])
def test_a_huge_n_samples_is_estimated_at_once(tiny_specs, pass_rate):
    """`cfgen plan` with n_samples 10^9 (issue 44): no loop over every round, and still the right expectation."""
    import time

    params = make_params(tiny_specs, n_samples=10**9, adaptive={"enabled": True, "round_samples": 4,
                                                                "min_accepted": 1})
    started = time.perf_counter()
    rendered, accepted = estimate.pair_outlook((), pass_rate, params, adaptive=True)
    assert time.perf_counter() - started < 10
    if pass_rate == 0.0:  # never passes: every round is rendered
        assert (rendered, accepted) == (10**9, 0.0)
    elif pass_rate == 0.5:  # rounds of 4 until one passes: 4 / P(a round has a pass)
        assert rendered == pytest.approx(4 / (1 - 0.5**4), abs=1e-3)
    else:  # a round's chance barely falls: MAX_ROUNDS summed, the rest at the last one's chance (an upper bound)
        assert 0.5 * 10**9 < rendered <= 10**9 and accepted == pytest.approx(1 - (1 - 1e-9) ** 10**9, rel=1e-3)


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
    assert off.h100_hours == pytest.approx(off.unet_rows / 432.0 / 3600)  # SD v1.5's measured H100 rate
    sdxl = estimate.estimate(measured(), params.model_copy(update={"backend": "sdxl"}), 1, 64, adaptive=False)
    assert sdxl.unet_rows == off.unet_rows and sdxl.gpu_hours == off.gpu_hours  # same rows; this device measured
    assert sdxl.h100_hours == pytest.approx(off.h100_hours * 6761.2 / 803.3)  # UNet GFLOPs at 1024 px / at 512 px
    sd3 = estimate.estimate(measured(), params.model_copy(update={"backend": "sd3"}), 1, 64, adaptive=False)
    assert sd3.h100_hours == pytest.approx(off.h100_hours * 11249.6 / 803.3)  # SD 3.5 Medium's transformer's
    on = estimate.estimate(measured(), params, 1, 64, adaptive=True)
    assert on.samples < off.samples and on.accepted == off.accepted and on.gpu_hours < off.gpu_hours
    fixed = 5.0 + 4.0 + 2 * 3.0
    walls = {k: estimate.estimate(measured(), params, k, 64, adaptive=False).image_wall_seconds - fixed
             for k in (1, 2, 70, 1000)}
    selection_tasks = math.ceil(off.accepted / 10)  # 62 (and 70 generate tasks): both halve on 2 workers
    assert walls[2] == pytest.approx(walls[1] / 2)
    assert walls[70] == walls[1000] == pytest.approx(10 * 20 * 0.5 + off.accepted / selection_tasks * 0.6)
    assert off.wall_seconds == off.caption_wall_seconds + off.image_wall_seconds


KINDS = {"all": lambda i: True, "none": lambda i: False, "late": lambda i: i >= 3, "once": lambda i: i == 4}


def test_a_pilot_where_passing_clusters_by_pair_is_replayed_to_the_true_counts(tiny_specs, tmp_path):
    """A pilot's samples table (6 samples of 20 pairs: 5 whose samples all pass, 5 none, 5 from sample 3 on, 5 only
    sample 4) read as `cfgen plan` reads it: the per-pair replay gives the pairs selection accepts and the samples the
    real adaptive loop renders; the binomial at the pooled pass rate (10/24) misses both."""
    from flows.plan import pass_rates

    path = tmp_path / "samples.parquet"
    plan_params = project_params("profile=paper", f"paths.samples={path}")
    kinds = {f"{kind}-{j}": rule for kind, rule in KINDS.items() for j in range(5)}
    pairs = [{**PAIRS.row(0, named=True), "caption_id": pair} for pair in kinds]
    off = make_params(tiny_specs, n_samples=6)

    def passes(pair: str, i: int) -> bool:
        return kinds[pair](i)

    pilot_run = ScriptedScreening(off, passes)
    rows = [row for pair in pairs for row in generate.pair_rows(pair, pilot_run, plan_params.selection)]
    pl.DataFrame(rows, schema=generate.SCHEMA).write_parquet(path)
    rate, pilot, source = pass_rates(plan_params, None)
    assert rate == 10 / 24 and len(pilot) == 20 and source.endswith("(120 samples of 20 pairs)")
    accepted = thresholds.ranked(pl.read_parquet(path), plan_params.selection)["caption_id"].n_unique()
    assert accepted == 15

    on = make_params(tiny_specs, n_samples=6, adaptive={"enabled": True, "round_samples": 1, "min_accepted": 1})
    adaptive_run = ScriptedScreening(on, passes)
    for pair in pairs:
        generate.pair_rows(pair, adaptive_run, plan_params.selection)
    assert adaptive_run.rendered == 5 * (1 + 6 + 4 + 5)
    with_pilot = measured(pass_rate=rate, pilot=pilot)
    for params, adaptive, rendered in ((off, False, 120), (on, True, adaptive_run.rendered)):
        samples, share = estimate.outlook(with_pilot, params, adaptive)
        assert (20 * samples, 20 * share) == pytest.approx((rendered, accepted))
        samples, share = estimate.outlook(replace(with_pilot, pilot=()), params, adaptive)
        assert 20 * share == pytest.approx(20 * (1 - (14 / 24) ** 6)) and 20 * share > 19
        assert 20 * samples < 0.6 * rendered if adaptive else 20 * samples == rendered
    spread = estimate.pass_spread(pilot)
    assert (spread["pairs"], spread["all_pass"], spread["none_pass"], spread["p50"]) == (20, 0.25, 0.25, 1 / 3)
