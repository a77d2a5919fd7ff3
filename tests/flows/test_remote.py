"""Results shared through a real DVC remote (issue 68): a WebDAV server on loopback (`flows.services.remote`, what
`make remote` runs) with the dvc-webdav plug-in. A project pushes two committed dataset versions; a fresh clone pulls
and `cfgen diff`s them without running a stage, byte for byte as where they were made; a push killed midway resumes;
a version the remote lacks is one line.

The project's one stage stands in for the pipeline: it writes a dataset version (counterfactual captions, selected
pairs and their PNGs, run metrics) in the paths `cfgen diff` reads, from the rows `version.json` lists, and counts its
runs in a file outside the project."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows import services
from tasks.core.errors import UserError
from tests.conftest import ROOT
from tests.flows.test_cli import assert_one_error, cfgen

STAGE = '''"""A dataset version from version.json: [caption_id, caption, word, substitute, image seed] per pair."""
import json, os, sys
import numpy as np
import polars as pl
from tasks.core import schemas
from tasks.image import store

rows = json.load(open("version.json"))
counterfactuals = pl.DataFrame(
    [{**dict.fromkeys(schemas.COUNTERFACTUALS), "caption_id": cid, "caption": caption, "original_word": word,
      "counterfactual": caption.replace(word, sub, 1), "substitute": sub} for cid, caption, word, sub, _ in rows],
    schema=schemas.COUNTERFACTUALS)
pairs = []
for (cid, caption, word, sub, seed), row in zip(rows, counterfactuals.iter_rows(named=True)):
    pixels = np.random.default_rng(seed).integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    images = [store.write_png("data/processed/images", image) for image in pixels]
    pairs.append({**dict.fromkeys(schemas.SELECTED), **{k: row[k] for k in ("caption_id", "caption", "counterfactual")},
                  "clip_dir": 0.3, "tried": 1, "image_o": images[0], "image_c": images[1]})
pl.DataFrame(pairs, schema=schemas.SELECTED).write_parquet("data/processed/selected.parquet")
counterfactuals.write_parquet("data/processed/counterfactual_captions.parquet")
os.makedirs("reports", exist_ok=True)
json.dump({"funnel": {"final": len(rows)}}, open("reports/metrics.json", "w"))
open(os.environ["STAGE_RUNS"], "a").write("ran\\n")
'''

DVC_YAML = f"""stages:
  version:
    cmd: {sys.executable} stage.py
    deps: [stage.py, version.json]
    outs: [data/processed/counterfactual_captions.parquet, data/processed/selected.parquet, data/processed/images]
    metrics: [reports/metrics.json: {{cache: false}}]
"""

PAIRS_A = [["p1", "A dog on a sofa.", "dog", "cat", 1], ["p2", "A man on a horse.", "horse", "bike", 2],
           ["p3", "A bowl of fruit.", "bowl", "plate", 3]]
PAIRS_B = [PAIRS_A[0], [*PAIRS_A[1][:4], 20], ["p3", "A bowl of fruit.", "bowl", "box", 3],
           ["p4", "A boat at sea.", "boat", "ship", 4]]  # p2 re-imaged, p3 re-captioned, p4 added


@pytest.fixture(scope="module")
def remote(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """The WebDAV remote's URL and the folder it serves."""
    store = tmp_path_factory.mktemp("webdav") / "store"
    with services.remote(store, services.free_port()) as url:
        yield url, store


def env_for(runs: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "STAGE_RUNS": str(runs), "DVC_NO_ANALYTICS": "1",
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def sh(folder: Path, *args: str) -> str:
    """A command's stdout and stderr; it must succeed."""
    done = subprocess.run(args, cwd=folder, env=env_for(folder.parent / "runs"), capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def dvc(folder: Path, *args: str) -> str:
    return sh(folder, sys.executable, "-m", "dvc", *args)


def origin(tmp_path: Path, url: str) -> Path:
    """A git + DVC project whose default remote is `url`."""
    project = tmp_path / "origin"
    project.mkdir(parents=True)
    shutil.copy(ROOT / "params.yaml", project / "params.yaml")
    (project / "stage.py").write_text(STAGE)
    (project / "dvc.yaml").write_text(DVC_YAML)
    (project / ".gitignore").write_text("/reports/diff/\n")
    sh(project, "git", "init", "-q", "-b", "main")
    dvc(project, "init", "-q")
    dvc(project, "remote", "add", "-d", "team", url)
    return project


def commit_version(project: Path, tag: str, rows: list) -> None:
    (project / "version.json").write_text(json.dumps(rows))
    dvc(project, "repro", "-q")
    sh(project, "git", "add", "-A")
    sh(project, "git", "commit", "-q", "-m", tag)
    sh(project, "git", "tag", tag)


def outputs(project: Path) -> dict[str, bytes]:
    return {str(p.relative_to(project)): p.read_bytes() for folder in ("data", "reports") if (project / folder).exists()
            for p in sorted((project / folder).rglob("*")) if p.is_file()}


def runs(folder: Path) -> int:
    path = folder.parent / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def pushed(output: str) -> int:
    """The count `dvc push` reports ("3 files pushed"; "Everything is up to date." is 0)."""
    words = output.split()
    return int(words[words.index("pushed") - 2]) if "pushed" in words else 0


def test_a_fresh_clone_pulls_and_diffs_two_versions_as_where_they_were_made_running_no_stage(tmp_path, remote):
    url, _ = remote
    project = origin(tmp_path / "a", url)
    commit_version(project, "va", PAIRS_A)
    assert pushed(dvc(project, "push")) == 3 + 2 * 3  # two parquet files, the image folder's manifest, 6 PNGs
    commit_version(project, "vb", PAIRS_B)
    assert pushed(dvc(project, "push")) > 0
    sh(project, sys.executable, "-m", "flows.cli", "diff", "va", "vb")
    made = {k: v for k, v in outputs(project).items() if k.startswith("reports/diff/")}
    assert json.loads(made["reports/diff/va..vb.json"])["pairs"]["added"] == 1 and runs(project) == 2

    clone = tmp_path / "b" / "clone"
    clone.parent.mkdir()
    sh(clone.parent, "git", "clone", "-q", str(project), str(clone))
    dvc(clone, "pull")
    assert "Data and pipelines are up to date" in dvc(clone, "status")  # nothing for `dvc repro` to recompute
    sh(clone, sys.executable, "-m", "flows.cli", "diff", "va", "vb")  # va's outputs come from the remote
    got = {k: v for k, v in outputs(clone).items() if k.startswith("reports/diff/")}
    assert got == made and runs(clone) == 0
    assert {k: v for k, v in outputs(clone).items() if not k.startswith("reports/diff/")} == {
        k: v for k, v in outputs(project).items() if not k.startswith("reports/diff/")}


def test_a_push_killed_midway_resumes_and_a_clone_pulls_every_byte(tmp_path, remote):
    url, store = remote
    project = origin(tmp_path / "a", url)
    commit_version(project, "big", [[f"k{i}", f"A cat number {i}.", "cat", "dog", 1000 + i] for i in range(100)])
    before = sum(1 for p in store.rglob("*") if p.is_file())
    push = subprocess.Popen([sys.executable, "-m", "dvc", "push", "-j", "1"], cwd=project, env=env_for(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while (at_kill := sum(1 for p in store.rglob("*") if p.is_file()) - before) < 10 and push.poll() is None:
        assert time.monotonic() < deadline, "the push sent nothing in 120 s"
        time.sleep(0.02)
    os.killpg(push.pid, signal.SIGKILL)
    push.wait()
    total = 2 + 1 + 2 * 100
    assert 10 <= at_kill < total, f"{at_kill} of {total} files were on the remote when the push was killed"
    resumed = pushed(dvc(project, "push"))
    assert 0 < resumed <= total - at_kill + 1  # the rest (and the file in flight), not everything again

    clone = tmp_path / "clone"
    sh(tmp_path, "git", "clone", "-q", str(project), str(clone))
    dvc(clone, "pull")
    assert outputs(clone) == outputs(project)


def test_a_version_the_remote_lacks_is_one_line_naming_the_remote(tmp_path, remote):
    url, _ = remote
    project = origin(tmp_path / "a", url)
    commit_version(project, "va", PAIRS_A)
    dvc(project, "push")
    unseen = [[f"q{i}", f"A frog number {i}.", "frog", "toad", 300 + i] for i in range(3)]  # on no remote: content
    commit_version(project, "vc", unseen)  # addresses its files, and this module's tests share it; never pushed
    clone = tmp_path / "b" / "clone"
    clone.parent.mkdir()
    sh(clone.parent, "git", "clone", "-q", str(project), str(clone))
    assert_one_error(cfgen(clone, "diff", "va", "vc"), "data/processed/counterfactual_captions.parquet of revision vc",
                     f"neither in this DVC cache nor on the DVC remote team ({url})", "`dvc push` it")


def test_a_service_whose_program_is_missing_is_one_line_and_makes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))  # wsgidav is looked up beside it too
    monkeypatch.setattr(services, "POSTGRES_BINARIES", ())
    with pytest.raises(UserError, match=r"^wsgidav is not installed: pip install wsgidav cheroot"):
        services.remote(tmp_path / "store", services.free_port()).__enter__()
    with pytest.raises(UserError, match=r"^initdb is not installed: apt-get install postgresql-15"):
        services.database(tmp_path / "cluster", services.free_port()).__enter__()
    assert sorted(tmp_path.iterdir()) == []
