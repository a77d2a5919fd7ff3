"""The demo profile's tiny models: the same captions and seed give byte-identical folders (so their fingerprints and
every cache key built on them are stable across machines); another seed gives other weights."""

from __future__ import annotations

from tasks.core.fingerprints import content_hash
from tasks.core.params import TinyModelsParams
from tasks.demo import tiny_models
from tests.conftest import DEMO_CAPTIONS

FOLDERS = ("vocab", "mlm", "clm", "diffusion", "clip", "hf_clip", "vilt")


def test_same_captions_and_seed_build_identical_folders(tmp_path):
    builds = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        tiny_models.build(DEMO_CAPTIONS, tmp_path / name, TinyModelsParams(seed=seed))
        builds[name] = {folder: content_hash(tmp_path / name / folder) for folder in FOLDERS}
    assert builds["a"] == builds["b"]
    assert sorted(f for f in FOLDERS if builds["c"][f] != builds["a"][f]) == ["clip", "clm", "diffusion", "hf_clip", "mlm", "vilt"]
