"""The cost model of a run: measured per-unit costs on this device, scaled to the whole input. Pure arithmetic.

A caption pair gets `n_samples` screening samples (adaptive off) or rounds of `round_samples` until `min_accepted`
of them pass selection (adaptive on); each sample costs `rows_per_sample x steps` UNet rows (its backend's
`BackendNeeds`). A pair with a passing sample is accepted and its winner rendered once more alone (the canonical
render). Passing clusters by pair (a pair whose
captions an image can show passes often, one it cannot never), so with a pilot run's samples both rules are replayed
pair by pair on them: each pair's own samples in order, then, past them, more samples passing at that pair's own
rate; the input's pairs are taken to be like the pilot's. Without a pilot every sample passes independently at one
`pass_rate` (a binomial), which overstates acceptance when passing clusters. Wall time on K workers: the image
stages' start-up and model loads, then tasks of `pairs_per_task` pairs spread over the workers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np

from tasks.image.params import GenerateParams

@dataclass(frozen=True)
class Measured:
    """What `cfgen plan` measured: counts on the input and a sample of it, and costs on this device (seconds)."""

    captions: int                 # valid captions in the input
    sample_captions: int          # of them, run through the caption stages
    sample_pairs: int             # caption pairs (C_o, C_c) those produced
    caption_seconds: float        # the caption stages' logic over the sample, models loaded
    caption_load_seconds: float   # loading the caption stages' models
    sample_seconds: float         # one screening sample at the configured steps, size and batch (UNet, decode, CLIP)
    canonical_seconds: float      # one canonical render (a sample alone) at the configured steps
    image_load_seconds: float     # loading the image models
    startup_seconds: dict[str, float]  # each image stage's command on no pairs: interpreter, imports, checks, flow
    pass_rate: float              # share of screening samples that pass selection
    record_bytes: float           # one sample's line in its pair record
    png_bytes: float              # one exported image (PNG)
    pilot: tuple[tuple[bool, ...], ...] = ()  # each pilot pair's samples in sample order, True: passes selection;
                                              # none: every pair at `pass_rate`


TAIL = 1e-12  # a round rendered with a smaller probability adds nothing an estimate shows (n_samples 10^9 included)
MAX_ROUNDS = 100_000  # rounds summed one by one; the rest of a larger n_samples at the last one's chance


def passing_at_least(count: int, samples: int, pass_rate: float) -> float:
    """P(at least `count` of `samples` samples pass): one minus the binomial CDF at `count - 1`."""
    return 1 - sum(math.comb(samples, k) * pass_rate**k * (1 - pass_rate) ** (samples - k)
                   for k in range(min(count, samples + 1)))


def pair_outlook(observed: Sequence[bool], rate: float, params: GenerateParams, adaptive: bool) -> tuple[float, float]:
    """(expected samples rendered, probability of acceptance) of a pair whose first samples passed as `observed` and
    whose later ones pass independently at `rate`: `n_samples`, or adaptive rounds until `min_accepted` passed;
    accepted when one of its `n_samples` passes (adaptive stops only once one has)."""
    def at_least(count: int, samples: int) -> float:  # P(at least `count` of the first `samples` pass)
        return passing_at_least(count - sum(observed[:samples]), max(0, samples - len(observed)), rate)

    n = params.n_samples
    accepted = at_least(1, n)
    if not adaptive:
        return float(n), accepted
    rounds, need = params.adaptive.round_samples, params.adaptive.min_accepted
    rendered = 0.0
    for i, start in enumerate(range(0, n, rounds)):  # a round is rendered while fewer than `need` before it passed
        still = 1 - at_least(need, start)
        if start >= len(observed) and still < TAIL:  # the rounds left add under n * TAIL samples
            return rendered, accepted
        if start >= len(observed) and i == MAX_ROUNDS:  # the rest at this round's chance: exact once it no longer
            return rendered + (n - start) * still, accepted  # changes (a pass rate of 0), else an upper bound
        rendered += min(rounds, n - start) * still
    return rendered, accepted


def outlook(measured: Measured, params: GenerateParams, adaptive: bool) -> tuple[float, float]:
    """(expected samples per pair, share of pairs accepted): the mean of `pair_outlook` over the pilot's pairs, each
    at its own pass rate; without a pilot, one pair with no samples seen at `pass_rate`."""
    pairs = [(passes, sum(passes) / len(passes)) for passes in measured.pilot if passes] or [((), measured.pass_rate)]
    samples, accepted = np.mean([pair_outlook(passes, rate, params, adaptive) for passes, rate in pairs], axis=0)
    return float(samples), float(accepted)


def pass_spread(pilot: Sequence[Sequence[bool]]) -> dict:
    """How the pilot's pairs' own pass rates spread: their 10th, 25th, 50th, 75th and 90th percentiles, and the shares
    of pairs whose samples all pass and none pass (empty without a pilot)."""
    rates = np.array([sum(passes) / len(passes) for passes in pilot if passes])
    if not rates.size:
        return {}
    quantiles = np.quantile(rates, [0.1, 0.25, 0.5, 0.75, 0.9])
    return {"pairs": int(rates.size), **{f"p{q}": float(v) for q, v in zip((10, 25, 50, 75, 90), quantiles)},
            "all_pass": float(np.mean(rates == 1)), "none_pass": float(np.mean(rates == 0))}


@dataclass(frozen=True)
class Estimate:
    adaptive: bool
    pairs: float
    accepted: float
    samples: float
    unet_rows: float
    gpu_hours: float              # the image stages' compute on this device, summed over workers
    h100_hours: float             # the UNet rows at the backend's H100 rate (`BackendNeeds`)
    store_bytes: float            # pair records and canonical PNGs in the result store
    export_bytes: float           # the winners' PNGs: the selection folder and the exported dataset
    caption_wall_seconds: float   # the caption stages on `workers` workers
    image_wall_seconds: float     # then the image stages
    wall_seconds: float


def caption_wall(measured: Measured, workers: int, shard_size: int) -> float:
    """The caption stages on `workers` workers: model loads, then content-defined shards spread over them."""
    per_caption = measured.caption_seconds / max(measured.sample_captions, 1)
    shards = max(1, math.ceil(measured.captions / shard_size))
    return measured.caption_load_seconds + per_caption * measured.captions / min(workers, shards)


def image_wall(measured: Measured, params: GenerateParams, pairs: float, samples_per_pair: float, accepted: float,
               workers: int) -> float:
    """generate then selection: each its start-up and model load, then its tasks of `pairs_per_task` pairs."""
    def spread(units: float, unit_seconds: float) -> float:
        tasks = math.ceil(units / params.pairs_per_task)
        return math.ceil(tasks / workers) * units / max(tasks, 1) * unit_seconds

    fixed = sum(measured.startup_seconds.values()) + 2 * measured.image_load_seconds
    return (fixed + spread(pairs, samples_per_pair * measured.sample_seconds)
            + spread(accepted, measured.canonical_seconds))


def estimate(measured: Measured, params: GenerateParams, workers: int, shard_size: int, adaptive: bool) -> Estimate:
    """The whole input's cost with adaptive over-generation off or on."""
    pairs = measured.captions * measured.sample_pairs / max(measured.sample_captions, 1)
    per_pair, accepted_share = outlook(measured, params, adaptive)
    accepted = pairs * accepted_share
    samples = pairs * per_pair
    unet_rows = (samples + accepted) * params.needs.rows_per_sample * params.steps
    images = 2 * accepted * measured.png_bytes
    captions, image = (caption_wall(measured, workers, shard_size),
                       image_wall(measured, params, pairs, per_pair, accepted, workers))
    return Estimate(
        adaptive=adaptive, pairs=pairs, accepted=accepted, samples=samples,
        unet_rows=unet_rows, h100_hours=unet_rows / params.needs.h100_rows_per_second / 3600,
        gpu_hours=(samples * measured.sample_seconds + accepted * measured.canonical_seconds) / 3600,
        store_bytes=samples * measured.record_bytes + images, export_bytes=2 * images,
        caption_wall_seconds=captions, image_wall_seconds=image, wall_seconds=captions + image)


def plan(measured: Measured, params: GenerateParams, workers: int, shard_size: int) -> dict:
    """The measured costs (the pilot as its `pass_spread`), the backend's H100 rate and both estimates, as JSON-ready
    values."""
    shown = {f.name: getattr(measured, f.name) for f in fields(measured) if f.name != "pilot"}
    h100 = {"rows_per_second": params.needs.h100_rows_per_second, "reference": params.needs.reference}
    return {"workers": workers, "measured": {**shown, "pass_spread": pass_spread(measured.pilot)}, "h100": h100,
            "estimates": {("on" if adaptive else "off"): asdict(estimate(measured, params, workers, shard_size,
                                                                          adaptive))
                          for adaptive in (False, True)}}
