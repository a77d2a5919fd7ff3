"""`cfgen plan`: the pre-flight before GPU spend. Measures on this device, through the stages' own code, then scales.

- models: every model of the profile present offline (`tasks.plan.preflight`), else the line that fetches it;
- caption stages: their logic over a seeded sample of the input, models loaded: captions/s and pairs per caption;
- image stages: `generate`'s screening (`generate.pair_rows`, P2P processor, CLIP scores, a real pair record) and
  `selection`'s canonical render at the configured size and batch, with `bench_steps` denoising steps; UNet calls
  are timed apart from the rest, so a sample's cost at the configured steps is `steps x UNet + the rest`;
- start-up: each image stage's `cfgen` command on an empty input (interpreter, imports, model checks, Prefect flow);
- pass rates: each pair's own, measured on `paths.samples` when a run left one (the estimate replays the selection
  and adaptive rules pair by pair on them), else one `--pass-rate` for every sample.
The estimates (`tasks.plan.estimate`) go to a table and to a JSON report.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import cast

import polars as pl
from rich.filesize import decimal
from rich.table import Table

from flows.engine.console import console
from flows.engine.workspace import result_store
from flows.measure import caption_bench, image_bench, quiet_placement, startup_seconds
from tasks.core.errors import UserError
from tasks.core.io import read_frame
from tasks.core.loading import release_models
from tasks.core.schemas import PAIR, SAMPLES
from tasks.plan import estimate, preflight
from tasks.stages import Params


def pass_rates(params: Params, given: float | None) -> tuple[float, tuple[tuple[bool, ...], ...], str]:
    """(share of screening samples passing selection, each pilot pair's samples in sample order (True: passes; none
    with `given`), where they come from)."""
    if given is not None:
        return given, (), "--pass-rate"
    path = Path(params.paths.samples)
    if not path.is_file():
        raise UserError(f"no samples table at {path} to measure the pass rate on: give --pass-rate (the share of "
                        "screening samples that pass selection, e.g. 0.1)")
    from tasks.image.thresholds import passing

    scores = read_frame(path, SAMPLES, "generate").with_columns(passes=passing(params.selection))
    if scores.is_empty():
        raise UserError(f"the samples table {path} is empty: give --pass-rate")
    pilot = scores.group_by(list(PAIR), maintain_order=True).agg(pl.col("passes").sort_by("sample"))["passes"]
    return (cast(float, scores["passes"].mean()), tuple(map(tuple, pilot.to_list())),
            f"{path} ({scores.height} samples of {pilot.len()} pairs)")


def make_plan(source: Path, params: Params, params_file: Path, overrides: list[str], workers: int, sample: int,
              given_pass_rate: float | None, bench_steps: int) -> dict:
    """The whole report: models, devices, measurements, estimates, free disk, and whether the run may start."""
    quiet_placement()
    models = preflight.check_models(params)
    report = {"profile": params.profile, "source": str(source), "models": [asdict(m) for m in models],
              "devices": preflight.devices(), "missing": [m.key for m in models if not m.present]}
    if report["missing"]:
        return {**report, "ready": False}
    if lacking := [line for section in preflight.running_sections(params) for line in preflight.incomplete(section)]:
        raise UserError("; ".join(lacking))  # what a stage's pre-flight says (`flows.commands.check_models`)
    rate, pilot, rate_source = pass_rates(params, given_pass_rate)
    counts, pairs = caption_bench(source, params, sample)
    release_models()  # the caption stages' models go before the image stages' load, as in a run
    if not pairs:
        raise UserError(f"the caption stages made no caption pair from {counts['sample_captions']} sampled captions "
                        "of the input: nothing to estimate (raise --sample or check the params)")
    image = image_bench(params, pairs[:3], bench_steps)
    measured = estimate.Measured(**counts, startup_seconds=startup_seconds(params, params_file, overrides),
                                 pass_rate=rate, pilot=pilot,
                                 **{k: v for k, v in image.items() if k != "unet_rows_per_second"})
    result = estimate.plan(measured, params.generate, workers, params.engine.shard_size)
    worst = max(result["estimates"].values(), key=lambda e: e["store_bytes"] + e["export_bytes"])
    places = {"store": result_store(params), "export": Path(params.paths.export)}
    short = preflight.disk_short({places["store"]: worst["store_bytes"], places["export"]: worst["export_bytes"]})
    free = {name: preflight.free_bytes(path) for name, path in places.items()}
    return {**report, **result, "pass_rate_source": rate_source, "bench_steps": bench_steps,
            "unet_rows_per_second": image["unet_rows_per_second"], "free_bytes": free, "disk_short": short,
            "ready": not short}


def _duration(seconds: float) -> str | None:
    for unit, scale, limit in (("ms", 1e-3, 1), ("s", 1, 120), ("min", 60, 7200), ("h", 3600, float("inf"))):
        if seconds < limit:
            return f"{seconds / scale:.1f} {unit}"
    return None  # an infinite or NaN duration


def _spread(spread: dict) -> str:
    quantiles = ", ".join(f"p{q} {spread[f'p{q}']:.2f}" for q in (10, 25, 50, 75, 90))
    return f"{quantiles}; all pass {spread['all_pass']:.0%}, none {spread['none_pass']:.0%} of {spread['pairs']} pairs"


def show_plan(report: dict) -> None:
    """The report as tables on the terminal."""
    models = Table("model", "name", "present", "device", "dtype", title=f"{report['profile']} profile: models")
    models.columns[1].overflow = "fold"
    for m in report["models"]:
        models.add_row(m["key"], m["model"], "yes" if m["present"] else f"[red]no[/red]: {m['fetch'] or 'missing'}",
                       m["device"], m["dtype"])
    console.print(models)
    if fetch := list(dict.fromkeys(m["fetch"] for m in report["models"] if not m["present"] and m["fetch"])):
        console.print("fetch the missing models (then plan again):\n" + "\n".join(f"  {line}" for line in fetch),
                      soft_wrap=True, highlight=False)
    devices = Table("device", "name", "memory GiB", "bfloat16", title="devices")
    for d in report["devices"]:
        devices.add_row(d["device"], d["name"], str(d["memory_gib"] or "-"), str(d["bfloat16"]))
    console.print(devices)
    if "estimates" not in report:
        return
    m, off, on = report["measured"], report["estimates"]["off"], report["estimates"]["on"]
    measured = Table("measured on this device", "value", title=f"micro-benchmark ({report['bench_steps']} steps)")
    for name, value in (
            ("captions in the input", f"{m['captions']}"),
            ("caption pairs per caption", f"{m['sample_pairs'] / m['sample_captions']:.3f} "
                                          f"({m['sample_pairs']} of {m['sample_captions']} sampled)"),
            ("caption stages", f"{m['sample_captions'] / m['caption_seconds']:.1f} captions/s"),
            ("UNet, P2P processor", f"{report['unet_rows_per_second']:.1f} rows/s"),
            ("screening sample", _duration(m["sample_seconds"])),
            ("canonical render", _duration(m["canonical_seconds"])),
            ("image models load", _duration(m["image_load_seconds"])),
            ("stage start-up", ", ".join(f"{k} {_duration(v)}" for k, v in m["startup_seconds"].items())),
            ("pass rate", f"{m['pass_rate']:.3f} ({report['pass_rate_source']})"),
            *([("pass rate per pair", _spread(m["pass_spread"]))] if m["pass_spread"] else [])):
        measured.add_row(name, value)
    console.print(measured)
    table = Table("estimate", "adaptive off", "adaptive on",
                  title=f"estimate for {report['source']} on {report['workers']} worker(s)")
    for name, show, key in (("caption pairs", lambda v: f"{v:,.0f}", "pairs"),
                            ("accepted pairs", lambda v: f"{v:,.0f}", "accepted"),
                            ("screening samples", lambda v: f"{v:,.0f}", "samples"),
                            ("UNet rows", lambda v: f"{v:,.0f}", "unet_rows"),
                            ("GPU-hours (this device)", lambda v: f"{v:,.2f}", "gpu_hours"),
                            (f"H100-hours ({report['h100']['reference']}: {report['h100']['rows_per_second']:.0f} "
                             "UNet rows/s)", lambda v: f"{v:,.2f}", "h100_hours"),
                            ("result store", decimal, "store_bytes"),
                            ("export", decimal, "export_bytes"),
                            ("wall time: caption stages", _duration, "caption_wall_seconds"),
                            ("wall time: image stages", _duration, "image_wall_seconds"),
                            ("wall time", _duration, "wall_seconds")):
        table.add_row(name, show(off[key]), show(on[key]))
    console.print(table)
    console.print("covers the caption stages, generate and selection (the GPU work); not the judge, truth, "
                  "evaluation, object-removal and release stages")
    free = report["free_bytes"]
    console.print(f"free disk: result store {decimal(free['store'])}, export {decimal(free['export'])}")
    if report["disk_short"]:
        console.print("[red]disk short:[/red] " + "; ".join(report["disk_short"]), highlight=False)
