"""What re-renders, through the real `cfgen generate` on a copy of the project: real edits to its files, a real params
change and a real other version of diffusers on the path. Only what a sample executes, or the libraries it calls,
renders again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flows.engine.counters import run_log
from tests.conftest import ROOT
from tests.core.test_code import RETURN_ROWS
from tests.image.fixtures import PAIRS as PAIR_ROWS

pytest_plugins = ["tests.image.fixtures"]
pytestmark = pytest.mark.slow


@pytest.fixture
def project(tmp_path, prefect_server, tiny_specs):
    """A copy of the project's code and params, the tiny models, 2 caption pairs; `generate(*overrides)` runs the
    real command there and returns its metrics."""
    from prefect.settings import PREFECT_API_URL

    copy = tmp_path / "project"
    for name in ("tasks", "flows"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "params.yaml", copy / "params.yaml")
    PAIR_ROWS.write_parquet(copy / "pairs.parquet")
    diffusion, clip = tiny_specs
    overrides = [f"generate.diffusion.id={diffusion.id}", "generate.vae=null", f"generate.clip.id={clip.id}",
                 f"generate.clip.pretrained={clip.pretrained}", f"generate.clip.config={clip.config}",
                 "generate.size=32", "generate.steps=2", "generate.n_samples=2", "engine.torch_threads=1"]
    env = {**os.environ, "PYTHONPATH": str(copy), "PREFECT_API_URL": PREFECT_API_URL.value(),
           "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(tmp_path / "results")}

    def generate(*extra: str, path: str = "") -> dict:
        run_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [path, str(copy)]))}
        args = [a for o in (*overrides, *extra) for a in ("-p", o)]
        done = subprocess.run([sys.executable, "-m", "flows.cli", "generate", "pairs.parquet", "out.parquet", *args,
                               "--metrics", "metrics.json"], cwd=copy, env=run_env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(run_log(copy / "metrics.json").read_text())

    generate.root = copy
    generate.results = tmp_path / "results"
    return generate


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_only_what_a_sample_runs_or_calls_renders_again(project, tmp_path):
    root, rendered = project.root, lambda metrics: metrics["samples_rendered"]
    assert rendered(project()) == 4  # 2 pairs x 2 samples
    assert (root / "flows").is_dir() and (root / "out.parquet").is_file()

    edit(root / "tasks/core/params.py", "assembles only the sections", "assembles just the sections")  # a docstring
    edit(root / "tasks/removal/params.py", "class RemovalMasksParams(Section):",  # a comment, a param def
         "class RemovalMasksParams(Section):  # another stage's section\n    extra_knob: int = 3")
    edit(root / "tasks/image/p2p.py", RETURN_ROWS, f"\n{RETURN_ROWS}  # ok")
    assert rendered(project("similarity.upper=0.95", "removal_masks.alpha1=0.05")) == 0  # + other stages' params

    p2p = root / "tasks/image/p2p.py"
    before = p2p.read_text()
    edit(p2p, "    mask = shared.view(-1, *([1] * (x.ndim - 2)))",
         "    mask = shared.view(-1, *([1] * (x.ndim - 2))).bool()")  # inside the P2P processor
    assert rendered(project()) == 4

    site = tmp_path / "site" / "diffusers-99.0.0.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: diffusers\nVersion: 99.0.0\n")
    assert rendered(project(path=str(tmp_path / "site"))) == 4  # "another version of diffusers" installed first

    p2p.write_text(before)  # back to the first code and libraries: every sample is still in its record
    assert rendered(project()) == 0
    records = [p for p in (project.results / "samples").rglob("*") if p.is_file()]
    assert len(records) == 3 * 2  # three code/library states x two pairs: one record file each


def test_what_does_not_change_pixels_renders_nothing_and_what_runs_them_does(project, tmp_path):
    """The must-shows of the one key builder, each a real `cfgen generate` on 2 pairs."""
    root, pairs_generated = project.root, lambda metrics: metrics["pairs_generated"]
    assert pairs_generated(project()) == 2
    render = root / "tasks/image/render.py"
    edit(render, '"CUDA out of memory: batch_samples halved to %d"', '"out of GPU memory, %d samples a batch now"')
    assert pairs_generated(project()) == 0  # a log message
    assert pairs_generated(project("generate.diffusion.demo.device=cpu", "generate.clip.demo.device=cpu")) == 0
    # `auto` resolves to cpu here (`keys.placement`)

    site = tmp_path / "site" / "torchvision-99.0.0.dist-info"  # reached only through open_clip's preprocessing
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 99.0.0\n")
    assert pairs_generated(project(path=str(tmp_path / "site"))) == 2
    for name, version in (("certifi", "2099.1.1"), ("rich", "99.0.0")):  # a TLS bundle, console text: no pixel
        (site.parent / f"{name}-{version}.dist-info").mkdir()
        (site.parent / f"{name}-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    assert pairs_generated(project(path=str(tmp_path / "site"))) == 0

    edit(root / "tasks/image/p2p.py", "        residual = hidden_states\n",
         "        residual = hidden_states\n        hidden_states = hidden_states + 0\n")  # inside P2P's __call__
    assert pairs_generated(project()) == 2
