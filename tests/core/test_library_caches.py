"""The libraries' own caches are the project's (`tasks.config.PROJECT_CACHES`). `torch.compile` writes its kernels in
the project (`tasks.core.loading.compiled`), not in torch's default
`$TMPDIR/torchinductor_<user>`: generate's `compile_unet` and `cfgen toy-world train --compile` write nothing outside
the project, whether the process set its environment up as `cfgen` does before importing torch
(`use_project_environment`) or imported torch's compiler first (a Dask worker, a benchmark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.config import PATH_VARIABLES, PROJECT_CACHES
from tasks.core.source import COMPILE_CACHE
from tests.conftest import ROOT

PROBE = """
import sys
from tasks.config import use_project_environment
if sys.argv[1] == "cfgen":
    use_project_environment()
import torch
from torch._inductor.runtime.cache_dir_utils import cache_dir
from tasks.core.loading import compiled
linear = compiled(torch.nn.Linear(4, 4), "default")
linear(torch.ones(2, 4)).sum().backward()
print(cache_dir())
"""


def compile_in_fresh_process(tmp_path, start: str, **env) -> tuple[str, list[Path]]:
    """(inductor's cache folder, what the process left in its TMPDIR) for a compiled forward and backward."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    clean = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    done = subprocess.run([sys.executable, "-c", PROBE, start], cwd=tmp_path, env=clean | {"TMPDIR": str(temp)} | env,
                          capture_output=True, text=True, timeout=600, check=True)
    return done.stdout.split()[-1], list(temp.rglob("*"))


@pytest.mark.parametrize("start", ["cfgen", "torch first"])
def test_compiled_kernels_go_to_the_projects_cache_and_nothing_to_the_temporary_folder(tmp_path, start):
    folder, left = compile_in_fresh_process(tmp_path, start)
    assert folder == str(COMPILE_CACHE) == str(PROJECT_CACHES["TORCHINDUCTOR_CACHE_DIR"])
    assert COMPILE_CACHE.is_relative_to(ROOT)
    if start == "cfgen":
        assert not left, left
    else:  # importing torch's compiler made its default folder, and nothing went into it
        assert not [path for path in left if path.is_file()], left
    assert any(COMPILE_CACHE.rglob("*.py"))  # the generated kernels are there


def test_matplotlib_builds_its_font_list_in_the_project_not_the_home_folder(tmp_path):
    """As `cfgen report` imports it: HOME and XDG folders stay empty."""
    home = tmp_path / "home"
    home.mkdir()
    probe = ("from tasks.config import use_project_environment; use_project_environment(); "
             "import matplotlib; from matplotlib import font_manager; print(matplotlib.get_cachedir())")
    clean = {k: v for k, v in os.environ.items() if k != "MPLCONFIGDIR" and not k.startswith("XDG_")}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=clean | {"HOME": str(home)},
                          capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.split()[-1] == str(PROJECT_CACHES["MPLCONFIGDIR"])
    assert not list(home.rglob("*"))
    assert any(PROJECT_CACHES["MPLCONFIGDIR"].glob("fontlist-*.json"))


def test_a_users_own_compile_cache_is_kept(tmp_path):
    own = tmp_path / "inductor"
    folder, _ = compile_in_fresh_process(tmp_path, "cfgen", TORCHINDUCTOR_CACHE_DIR=str(own))
    assert folder == str(own) and any(own.rglob("*.py"))


def test_a_path_variable_set_empty_is_unset_not_the_current_folder(tmp_path):
    """`PREFECT_HOME=` put Prefect's database and result store in the folder `cfgen` ran in, and
    `PREFECT_RESULTS_LOCAL_STORAGE_PATH=` its results: every path variable set empty is read as unset."""
    probe = ("import os, json; from tasks.config import use_project_environment; use_project_environment(); "
             "from prefect.settings import get_current_settings as get; s = get(); "
             "print(json.dumps([str(s.home), str(s.results.local_storage_path), dict(os.environ)]))")
    empty = dict.fromkeys(PATH_VARIABLES, "")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=os.environ | empty, capture_output=True,
                          text=True, timeout=300, check=True)
    home, store, env = json.loads(done.stdout.splitlines()[-1])
    assert (home, store) == (".prefect", ".prefect/storage")  # prefect.toml's, as when they are unset
    assert {name: env.get(name) for name in PROJECT_CACHES} == {k: str(v) for k, v in PROJECT_CACHES.items()}
    assert env["NLTK_DATA"] and all(env.get(name) != "" for name in PATH_VARIABLES)
