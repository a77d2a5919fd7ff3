"""The paper profile end to end on random weights of every published model shape (`benchmarks/paper_rehearsal.py`,
64 px): a shape, dtype, device or config error anywhere on the paper path fails here, not on the user's GPU hours.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import polars as pl
import pytest
import yaml
from PIL import Image

from tests.conftest import ROOT, requires_nltk

pytestmark = [requires_nltk, pytest.mark.slow]


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The rehearsal's project (~5 GB of paper-shape models), removed after this module."""
    out = tmp_path_factory.mktemp("rehearsal")
    done = subprocess.run([sys.executable, "benchmarks/paper_rehearsal.py", str(out), "--captions", "2", "--samples",
                           "2", "--steps", "2", "--size", "64", "--removal-images", "2"], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    print(done.stdout[-6000:])
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    report = json.loads((out / "rehearsal.json").read_text())
    yield out / "project", {row["stage"]: row for row in report["stages"]}
    shutil.rmtree(out, ignore_errors=True)


def test_every_stage_of_the_dag_runs_once_and_no_demo_stage(rehearsal):
    project, stages = rehearsal
    dag = set(yaml.safe_load((project / "dvc.yaml").read_text())["stages"])
    assert set(stages) - {"(stand-in models)", "(dvc repro again)"} == dag  # nothing from demo/dvc.yaml
    assert stages["(dvc repro again)"]["reran"] == []
    assert not (project / "models" / "demo").exists() and not (project / "data/raw/synthetic_coco").exists()


def test_rows_flow_through_the_published_shapes(rehearsal):
    project, stages = rehearsal
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert params["profile"] == "paper" and params["generate"]["diffusion"]["paper"]["dtype"] == "float16"
    pairs = stages["generate"]["rows_in"]
    assert pairs > 0 and stages["generate"]["rows_out"] == 2 * pairs  # every pair x n_samples, screened
    assert stages["selection"]["rows_out"] == pairs and stages["export"]["rows_out"] == pairs  # gates opened
    selected = pl.read_parquet(project / "data/processed/selected.parquet")
    with Image.open(project / "data/processed/images" / selected["image_c"][0]) as image:
        assert image.size == (64, 64)
    card = (project / "data/export/README.md").read_text()
    for model in ("roberta-base", "gpt2-large", "stable-diffusion-v1-5", "sd-vae-ft-mse"):
        assert model in card  # the stand-ins, recorded as the run's models
    evaluation = json.loads((project / "reports/evaluation/metrics.json").read_text())
    assert set(evaluation["models"]) == {"clip_b32"} and evaluation["pairs"] == pairs
