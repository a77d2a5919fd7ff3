"""`cfgen` outside `make` (issue 44): without NLTK_DATA, from another working directory, it finds the tagger and
WordNet where the Makefile does (`../shared/nltk_data` beside the project, else `.nltk_data`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import polars as pl

from tests.conftest import ROOT, WORLD_CAPTIONS, requires_nltk

pytestmark = requires_nltk


def test_a_caption_step_finds_its_nltk_data_without_nltk_data_set(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NLTK_DATA"} | {"HOME": str(tmp_path)}  # no ~/nltk_data
    source = tmp_path / "captions.tsv"
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    source.write_text("\n".join(WORLD_CAPTIONS.read_text().splitlines()[:3]) + "\n")
    for step, given, made in (("ingest", source, "captions.parquet"), ("sites", "captions.parquet", "sites.parquet")):
        done = subprocess.run([sys.executable, "-m", "flows.cli", step, str(given), made], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    assert pl.read_parquet(tmp_path / "sites.parquet").height > 3  # tagged: every caption has noun sites
