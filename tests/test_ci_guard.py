"""Under CI=true, each part of `../shared` the tests need is required: a missing one stops the run before any test
(rather than every test that needs it skipping quietly); with all present, the run goes ahead."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REQUIRED_IN_CI, ROOT, SHARED


def collect(shared) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": "true", "CFGEN_SHARED": str(shared)}
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "tests/test_layering.py"], cwd=ROOT, env=env, capture_output=True, text=True)


def fake_shared(root, without=None):
    """A `shared` folder with every required path (empty stand-ins) except `without`."""
    for path in REQUIRED_IN_CI:
        if path == without:
            continue
        stand_in = root / path.relative_to(SHARED)
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.mkdir() if not path.suffix else stand_in.touch()
    return root


@pytest.mark.parametrize("missing", REQUIRED_IN_CI, ids=lambda p: p.relative_to(SHARED).as_posix())
def test_each_missing_shared_path_fails_the_ci_run(tmp_path, missing):
    done = collect(fake_shared(tmp_path / "shared", without=missing))
    assert done.returncode != 0
    assert f"CI=true but {tmp_path / 'shared' / missing.relative_to(SHARED)} missing" in done.stdout + done.stderr


def test_a_complete_shared_folder_lets_the_ci_run_go_ahead(tmp_path):
    done = collect(fake_shared(tmp_path / "shared"))
    assert done.returncode == 0, done.stdout + done.stderr
