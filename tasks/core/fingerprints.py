"""Model identity: what a `ModelSpec` names, as content, for cache keys and dataset provenance. Imports no torch.

A fingerprint names a model's content, never just its name: a local file or folder is a hash of its bytes, a hub
model the commit it resolves to in the local Hugging Face cache (never the network), an open_clip model a hash of its
architecture and weights. A model that cannot be identified raises `ModelNotFound` (one line).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from functools import cache
from pathlib import Path

from pydantic import BaseModel

from tasks.core.errors import UserError
from tasks.core.specs import ClipSpec, ModelSpec, model_specs

COMMIT = re.compile(r"[0-9a-f]{40}")


class ModelNotFound(UserError):
    """A model that is neither a local path nor resolvable offline; its message is one line."""


def content_hash(path: Path) -> str:
    """16 hex of sha256 over (relative path, sha256 of bytes) of every file under `path` (a file: just itself)."""
    if not path.exists():
        raise ModelNotFound(f"model file {path} does not exist")
    root, files = (path, sorted(p for p in path.rglob("*") if p.is_file())) if path.is_dir() else (path.parent, [path])
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.relative_to(root).as_posix().encode())
        with file.open("rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()[:16]


def hf_cache_dir() -> str:
    """The hub cache huggingface_hub would use, read from the environment now (its `constants` are set at import)."""
    home = os.getenv("HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", "~/.cache"), "huggingface"))
    cache_dir = os.getenv("HF_HUB_CACHE", os.getenv("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub")))
    return os.path.expandvars(os.path.expanduser(cache_dir))


def is_hub_id(model_id: str) -> bool:
    """`org/name` that huggingface_hub accepts as a repo id (a bare `name` counts as a local path here)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(model_id)  # raises, else returns None
        return model_id.count("/") == 1
    except HFValidationError:
        return False


@cache
def fingerprint(spec: ModelSpec) -> str:
    """`id#hash16` of a local file/folder's content; `id@commit` of a hub model (a pinned 40-hex revision, else the
    snapshot its revision resolves to in the local HF cache, never the network); a `ClipSpec` -> `clip_fingerprint`.
    Raises `ModelNotFound` (one line) when none applies."""
    if isinstance(spec, ClipSpec):
        return clip_fingerprint(spec)
    path = Path(spec.local())
    if path.exists():
        return f"{spec.id}#{content_hash(path)}"
    if not is_hub_id(spec.id):
        raise ModelNotFound(f"model folder {spec.id} does not exist")
    if spec.revision and COMMIT.fullmatch(spec.revision):
        return f"{spec.id}@{spec.revision}"
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache_dir = hf_cache_dir()
    try:
        snapshot = snapshot_download(spec.id, revision=spec.revision, cache_dir=cache_dir, local_files_only=True)
    except LocalEntryNotFoundError:  # also IncompleteSnapshotError (a partial download)
        raise ModelNotFound(f"model {spec.id}@{spec.revision or 'main'} is neither a local path nor in the Hugging "
                            f"Face cache ({cache_dir}); download it first or pin revision to a commit") from None
    return f"{spec.id}@{Path(snapshot).name}"


def cached_file(spec: ModelSpec, name: str) -> Path | None:
    """File `name` of `spec`'s local folder, else of the snapshot its revision resolves to in the local HF cache
    (never the network); None where neither holds it."""
    path = Path(spec.local()) / name
    if path.is_file():
        return path
    if not is_hub_id(spec.id):
        return None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(spec.id, name, cache_dir=hf_cache_dir(), revision=spec.revision)
    return Path(found) if isinstance(found, str) else None


def _open_clip():
    import open_clip

    return open_clip


@cache
def clip_fingerprint(spec: ClipSpec) -> str:
    """`id:pretrained-name#hash16` over the architecture (the `config` file's bytes, else open_clip's registered
    config as sorted JSON) and the weights (the `pretrained` file's bytes, else open_clip's registry entry for the tag,
    which names the weights' URL/hub file). Offline: nothing is downloaded; open_clip is imported only for a registry
    lookup."""
    if spec.config is not None:
        architecture = content_hash(Path(spec.local(spec.config)))
    elif (config := _open_clip().get_model_config(spec.id)) is not None:
        architecture = json.dumps(config, sort_keys=True)
    else:
        raise ModelNotFound(f"open_clip has no architecture {spec.id} and no config file is given")
    weights = Path(spec.local(spec.pretrained))
    if weights.exists():
        weights_id = content_hash(weights)
    elif entry := _open_clip().get_pretrained_cfg(spec.id, spec.pretrained):
        weights_id = json.dumps(entry, sort_keys=True)
    else:
        raise ModelNotFound(f"CLIP weights {spec.pretrained} are neither a file nor an open_clip tag of {spec.id}")
    digest = hashlib.sha256(f"{architecture}\n{weights_id}".encode()).hexdigest()[:16]
    return f"{spec.id}:{weights.name}#{digest}"


def model_fingerprints(section: BaseModel) -> list[str]:
    """Content identities of every model spec in a params section, in field order (raises ModelNotFound)."""
    return [fingerprint(spec) for _, spec in model_specs(section)]
