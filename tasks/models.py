"""Model identity and placement: where a `ModelSpec` lives on disk, which device/dtype it runs in, its fingerprint.

Loaders are wrapped in `load_once`: cached per process on the frozen spec and serialised by a lock, so a stage loads
each model once however many shards (or threads) it runs, and a Dask worker once for all the shards it is given.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import threading
from collections.abc import Callable
from functools import cache, wraps
from typing import TypeVar
from pathlib import Path

import torch

from tasks.params import ModelSpec

log = logging.getLogger(__name__)
PACKAGE_SCHEME = "pkg:"
_LOAD_LOCK = threading.RLock()
T = TypeVar("T")


def load_once(loader: Callable[..., T]) -> Callable[..., T]:
    """Cache `loader` per (frozen) specs; concurrent first calls load once (lazy weight init is not thread-safe)."""
    cached = cache(loader)

    @wraps(loader)
    def load(*specs: ModelSpec | None) -> T:
        with _LOAD_LOCK:
            return cached(*specs)

    return load


def resolve_path(model_id: str) -> str:
    """`pkg:module/sub/dir` -> that folder inside an installed package; anything else is returned as is."""
    if not model_id.startswith(PACKAGE_SCHEME):
        return model_id
    package, _, sub = model_id.removeprefix(PACKAGE_SCHEME).partition("/")
    return str(importlib.resources.files(package).joinpath(sub))


def resolve_device(spec: ModelSpec) -> torch.device:
    if spec.device != "auto":
        return torch.device(spec.device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    log.warning("no GPU found: %s runs on CPU", spec.id)
    return torch.device("cpu")


def resolve_dtype(spec: ModelSpec, device: torch.device) -> torch.dtype:
    """`auto` is fp32 on CPU, bf16 on GPUs that have it, fp16 on the others."""
    if spec.dtype != "auto":
        return getattr(torch, spec.dtype)
    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


@cache
def fingerprint(spec: ModelSpec) -> str:
    """`id@revision` for hub models; a hash of every file for a local folder (its revision is its content)."""
    path = Path(resolve_path(spec.id))
    if not path.exists():
        return f"{spec.id}@{spec.revision or 'main'}"
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode())
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return f"{spec.id}#{digest.hexdigest()[:16]}"


def hub_kwargs(spec: ModelSpec) -> dict:
    return {"revision": spec.revision} if spec.revision else {}


@load_once
def load_pretrained(spec: ModelSpec, model_class: type) -> tuple:
    """(tokenizer, model in eval mode on its device and dtype) for a transformers `Auto*` model class."""
    from transformers import AutoTokenizer

    path, device = resolve_path(spec.id), resolve_device(spec)
    tokenizer = AutoTokenizer.from_pretrained(path, **hub_kwargs(spec))
    model = model_class.from_pretrained(path, dtype=resolve_dtype(spec, device), **hub_kwargs(spec))
    return tokenizer, model.to(device).eval()


def set_torch_threads(threads: int | None) -> None:
    """Pin CPU intra-op threads for the calling thread (OpenMP settings are per thread); None keeps the default."""
    if threads:
        torch.set_num_threads(threads)
