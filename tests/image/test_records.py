"""Pair records: one file per caption pair whatever n_samples is; a torn write is a miss, never a crash; a kill -9
mid-pair loses only the batch in flight."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tasks.image.records import MEASURED, PairRecords
from tests.image.fixtures import PAIRS, make_params, screen

pytest_plugins = ["tests.image.fixtures"]


def measured(clip_dir: float | None) -> dict:
    """A whole sample measurement (`records.MEASURED`)."""
    return {**dict.fromkeys(MEASURED), "nan": False, "max_pixel_o": 9, "max_pixel_c": 9, "clip_dir": clip_dir}


def test_a_torn_line_is_a_miss_and_later_appends_stay_readable(tmp_path):
    records = PairRecords(tmp_path)
    records.append("ab12", {"s1": measured(0.25), "s2": measured(None)})
    path = records.path("ab12")
    whole = path.read_bytes()
    path.write_bytes(whole[:-5])  # the second line cut mid-write
    assert records.read("ab12") == {"s1": measured(0.25)}
    records.append("ab12", {"s2": measured(0.5)})  # re-rendered: a line of its own, not glued to the torn one
    assert records.read("ab12") == {"s1": measured(0.25), "s2": measured(0.5)}
    assert records.read("absent") == {}
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["ab12.jsonl"]


def test_a_line_of_the_wrong_shape_is_a_miss_logged_once(tmp_path, caplog):
    records = PairRecords(tmp_path)
    records.append("cd34", {"s1": {}, "s2": measured(0.5), "s3": {"clip_dir": 0.1}})
    with records.path("cd34").open("a") as f:
        f.write('\n{"key": "s4", "measured": [1, 2]}\n"just a string"\n{"no": "key"}')
    assert records.read("cd34") == {"s2": measured(0.5)}  # s1, s3, s4 render again
    assert records.read("cd34") == {"s2": measured(0.5)}
    warned = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert warned == [f"{records.path('cd34')}: 5 line(s) unreadable, their samples render again"]


@pytest.mark.parametrize(("field", "value"), [
    ("clip_dir", "abc"), ("clip_dir", True), ("clip_dir", [0.1]), ("clip_dir", {"x": 1}), ("nan", "false"),
    ("nan", 0), ("max_pixel_o", 255.5), ("max_pixel_c", "255"), ("subject_margin_o", "0.1"),
    ("sim_image_image", False)])
def test_a_field_of_the_wrong_type_is_a_miss_not_a_crash(tmp_path, field, value):
    """A record line edited by hand or by another version (issue 44): its sample renders again, every rerun works."""
    records = PairRecords(tmp_path)
    records.append("ef56", {"s1": measured(0.5), "s2": {**measured(0.5), field: value}})
    assert records.read("ef56") == {"s1": measured(0.5)}
    kept = {**measured(None), "sim_image_image": float("-inf"), "clip_dir": 1}  # null, infinite, whole: numbers
    records.append("ef57", {"s1": kept})
    assert records.read("ef57") == {"s1": {**kept, "sim_image_image": None}}  # strict JSON: infinite is null


def test_a_pair_costs_one_record_file_whatever_n_samples(tmp_path, tiny_specs, image_models):
    records = PairRecords(tmp_path / "records")
    for n in (2, 7, 5):
        screen(PAIRS, make_params(tiny_specs, n_samples=n), image_models, records)
    files = [p for p in records.root.rglob("*") if p.is_file()]
    assert len(files) == PAIRS.height
    assert sorted(len(records.read(p.stem)) for p in files) == [7, 7]


SCREEN = """
import pathlib, sys, polars as pl, torch
from tasks.image.params import GenerateParams
from tasks.image import generate, render
from tasks.image.records import MEASURED, PairRecords
from tasks.stages import stage
torch.set_num_threads(1)
params = GenerateParams.model_validate_json(open(sys.argv[1]).read())
screening = generate.Screening(params, PairRecords(pathlib.Path(sys.argv[2])),
                               unit=render.sample_unit(params, stage("generate").code))
generate.run(pl.read_parquet(sys.argv[3]), screening)[0].write_parquet(sys.argv[4])
print(screening.rendered)
"""


def test_kill_9_mid_pair_loses_only_the_batch_in_flight(tmp_path, tiny_specs):
    """A real SIGKILL of a screening process once its pair's record holds 3 samples; the rerun renders only the rest
    and writes the rows of an uninterrupted run, byte for byte."""
    params = make_params(tiny_specs, n_samples=40, batch_samples=1)
    (tmp_path / "params.json").write_text(params.model_dump_json())
    PAIRS.head(1).write_parquet(tmp_path / "pairs.parquet")

    def samples_in(records: str) -> int:
        return sum(len(PairRecords(tmp_path / records).read(p.stem)) for p in (tmp_path / records).rglob("*.jsonl"))

    def run(records: str, out: str, kill_after: int | None = None) -> tuple[int, str]:
        process = subprocess.Popen([sys.executable, "-c", SCREEN, tmp_path / "params.json", tmp_path / records,
                                    tmp_path / "pairs.parquet", tmp_path / out], stdout=subprocess.PIPE, text=True)
        while kill_after is not None and process.poll() is None:
            if samples_in(records) >= kill_after:
                os.kill(process.pid, signal.SIGKILL)
                break
            time.sleep(0.005)
        stdout, _ = process.communicate(timeout=300)
        return process.returncode, stdout.strip()

    assert run("killed", "never.parquet", kill_after=3)[0] == -signal.SIGKILL
    kept = samples_in("killed")
    assert 3 <= kept < 40 and not (tmp_path / "never.parquet").exists()
    assert run("killed", "resumed.parquet") == (0, str(40 - kept))
    assert run("whole", "whole.parquet") == (0, "40")
    assert (tmp_path / "resumed.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()


def test_two_processes_screening_one_pair_render_each_sample_once(tmp_path, tiny_specs):
    """Two real processes on one record store (queued experiments, Dask workers) started together: the pair's lock
    makes the second read what the first rendered, so the renders add up to n_samples and both write equal rows."""
    params = make_params(tiny_specs, n_samples=6, batch_samples=1)
    (tmp_path / "params.json").write_text(params.model_dump_json())
    PAIRS.head(1).write_parquet(tmp_path / "pairs.parquet")
    processes = [subprocess.Popen([sys.executable, "-c", SCREEN, tmp_path / "params.json", tmp_path / "records",
                                   tmp_path / "pairs.parquet", tmp_path / f"{n}.parquet"], stdout=subprocess.PIPE,
                                  text=True) for n in range(2)]
    rendered = sorted(int(p.communicate(timeout=300)[0].strip()) for p in processes)
    assert all(p.returncode == 0 for p in processes)
    assert sum(rendered) == 6 and rendered[0] in (0, 6)  # one process renders the pair, the other waits and reads
    assert (tmp_path / "0.parquet").read_bytes() == (tmp_path / "1.parquet").read_bytes()
