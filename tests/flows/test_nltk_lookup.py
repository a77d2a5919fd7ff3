"""`cfgen` outside `make` (issues 44, 45): without NLTK_DATA, from another working directory, it finds the tagger and
WordNet where the Makefile does (`../shared/nltk_data` beside the project, else `.nltk_data`), and it runs the
Hugging Face libraries offline as the Makefile does."""

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


def test_cfgen_runs_offline_unless_the_environment_says_otherwise():
    """As the Makefile exports: the Hugging Face libraries offline by default (read once, at import), a user's
    explicit setting kept."""
    probe = ("import os; from tasks.config import use_project_environment; use_project_environment(); "
             "import huggingface_hub.constants as c; print(c.HF_HUB_OFFLINE, os.environ['TRANSFORMERS_OFFLINE'])")
    clean = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    for extra, shown in (({}, "True 1"), ({"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}, "False 0")):
        done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env={**clean, **extra}, capture_output=True,
                              text=True, timeout=120, check=True)
        assert done.stdout.split() == shown.split()
