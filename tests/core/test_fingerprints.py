"""Model fingerprints name content: local bytes, the commit a hub id resolves to in the local HF cache, CLIP weights."""

from __future__ import annotations

import json

import pytest

from tasks.core.fingerprints import ModelNotFound, clip_fingerprint, fingerprint
from tasks.core.specs import ClipSpec, ModelSpec
from tasks.tiny.images import build_tiny_clip

COMMIT_A, COMMIT_B = "a" * 40, "b" * 40


@pytest.fixture(autouse=True)
def fresh_cache():
    fingerprint.cache_clear()
    clip_fingerprint.cache_clear()
    yield
    fingerprint.cache_clear()
    clip_fingerprint.cache_clear()


def fp(model_id: str, revision: str | None = None) -> str:
    fingerprint.cache_clear()
    return fingerprint(ModelSpec(id=model_id, revision=revision))


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """A real hub cache layout for org/name: snapshots A (refs/main) and B (refs/dev)."""
    cache = tmp_path / "hub"
    repo = cache / "models--org--name"
    for commit in (COMMIT_A, COMMIT_B):
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text(json.dumps({"commit": commit}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT_A)
    (repo / "refs" / "dev").write_text(COMMIT_B)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return repo


def test_local_folder_hash_follows_every_byte_and_file(tmp_path):
    folder = tmp_path / "models" / "tiny" / "mlm"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)))
    first = fp(str(folder))
    assert first.startswith(f"{folder}#") and len(first.split("#")[1]) == 16
    assert fp(str(folder)) == first

    (folder / "sub" / "weights.bin").write_bytes(bytes(range(255)) + b"\x00")
    changed = fp(str(folder))
    assert changed != first

    (folder / "extra.txt").write_text("")
    assert fp(str(folder)) not in {first, changed}


def test_local_single_file(tmp_path):
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"weights")
    first = fp(str(file))
    assert first.startswith(f"{file}#")
    file.write_bytes(b"weightz")
    assert fp(str(file)) != first


def test_package_path_is_local():
    assert fp("pkg:tasks").startswith("pkg:tasks#")


def test_hub_id_resolves_to_cached_commit(hf_cache):
    assert fp("org/name") == f"org/name@{COMMIT_A}"
    (hf_cache / "refs" / "main").write_text(COMMIT_B)
    assert fp("org/name") == f"org/name@{COMMIT_B}"


def test_branch_revision_resolves_through_refs(hf_cache):
    assert fp("org/name", "dev") == f"org/name@{COMMIT_B}"
    assert fp("org/name", "main") == f"org/name@{COMMIT_A}"


def test_hf_home_is_honoured(tmp_path, monkeypatch, hf_cache):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # the fixture's cache is tmp_path/hub
    assert fp("org/name") == f"org/name@{COMMIT_A}"


def test_pinned_commit_is_its_identity_even_uncached(hf_cache):
    assert fp("other/model", COMMIT_B) == f"other/model@{COMMIT_B}"
    assert fp("org/name", COMMIT_B) == f"org/name@{COMMIT_B}"


@pytest.mark.parametrize("revision", [None, "dev", "v1.0"])
def test_unpinned_uncached_hub_id_raises_one_line(hf_cache, revision):
    with pytest.raises(ModelNotFound) as raised:
        fp("other/model", revision)
    message = str(raised.value)
    assert "\n" not in message
    assert message == (f"model other/model@{revision or 'main'} is neither a local path nor in the Hugging Face cache "
                       f"({hf_cache.parent}); download it first or pin revision to a commit")


def test_branch_missing_from_refs_raises(hf_cache):
    with pytest.raises(ModelNotFound, match=r"org/name@v2 is neither"):
        fp("org/name", "v2")


@pytest.mark.parametrize("model_id", ["models/tiny/mlm", "./nowhere", "/abs/nowhere", "pkg:tasks/nowhere", "gpt2"])
def test_missing_local_folder_raises(tmp_path, monkeypatch, model_id):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFound, match=f"^model folder {model_id} does not exist$"):
        fp(model_id)


def test_local_looking_two_part_id_falls_to_hub_rule(tmp_path, monkeypatch, hf_cache):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFound, match=r"^model models/tiny@main is neither a local path"):
        fp("models/tiny")


def test_clip_checkpoint_and_config_bytes(tmp_path):
    spec = build_tiny_clip(tmp_path / "a", seed=0)
    first = clip_fingerprint(spec)
    assert first.startswith("cfgen-tiny-clip:tiny_clip.safetensors#")
    assert fingerprint(spec) == first  # a ClipSpec inside stage params fingerprints the same way

    same = build_tiny_clip(tmp_path / "b", seed=0)
    assert clip_fingerprint(same) == first  # content, not location

    reseeded = build_tiny_clip(tmp_path / "c", seed=1)
    assert clip_fingerprint(reseeded) != first

    config = json.loads((tmp_path / "b" / "cfgen-tiny-clip.json").read_text())
    config["vision_cfg"]["layers"] = 2
    (tmp_path / "b" / "cfgen-tiny-clip.json").write_text(json.dumps(config))
    clip_fingerprint.cache_clear()
    assert clip_fingerprint(same) != first


def test_clip_tag_works_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path)
    b32 = clip_fingerprint(ClipSpec(id="ViT-B-32", pretrained="openai"))
    assert b32.startswith("ViT-B-32:openai#")
    assert clip_fingerprint(ClipSpec(id="ViT-B-32", pretrained="laion2b_s34b_b79k")) != b32
    assert clip_fingerprint(ClipSpec(id="ViT-L-14", pretrained="openai")) != b32
    assert not (tmp_path / "empty").exists()  # nothing downloaded


def test_clip_unknown_tag_or_architecture_raises(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFound):
        clip_fingerprint(ClipSpec(id="ViT-B-32", pretrained="no-such-tag"))
    with pytest.raises(ModelNotFound):
        clip_fingerprint(ClipSpec(id="no-such-arch", pretrained="openai"))
