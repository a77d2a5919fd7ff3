"""Model placement and loading: which device and dtype a `ModelSpec` runs in, and loaders that load once.

Loaders are wrapped in `load_once`: cached per process on the frozen spec and serialised by a lock, so a stage loads
each model once however many shards (or threads) it runs, and a Dask worker once for all the shards it is given.
The cache lives until `release_models`, which the stages' task runners call when a stage's flow run ends, in the
flow's process and on every Dask worker (`flows.engine.sharding.task_runner`): a process holds only the models of
the stage it runs, never every stage's it ran.
torch is imported inside the functions: a command that only checks its inputs and models never imports it.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
from collections.abc import Callable
from functools import cache, wraps
from typing import TYPE_CHECKING, Any, TypeVar, cast

from tasks.core.errors import UserError
from tasks.core.source import COMPILE_CACHE
from tasks.core.specs import ModelSpec

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
_LOAD_LOCK = threading.RLock()
_CACHES: list = []  # every `load_once` cache of this process
T = TypeVar("T")
M = TypeVar("M", bound="torch.nn.Module")


def _broken_files(error: BaseException) -> bool:
    """What a library raises for a model folder with a missing, corrupt or foreign file (not out of memory)."""
    return (isinstance(error, OSError | ValueError | KeyError | RuntimeError) or type(error).__name__ ==
            "SafetensorError") and type(error).__name__ != "OutOfMemoryError" and not isinstance(error, UserError)


def load_once(loader: Callable[..., T]) -> Callable[..., T]:
    """Cache `loader` per (frozen) specs until `release_models`; concurrent first calls load once (lazy weight init
    is not thread-safe). Every model load of the project goes through here, so a folder the library cannot load
    (no weights, no tokenizer, a corrupt config) is one `UserError` line naming it and the library's reason."""
    cached = cache(loader)
    _CACHES.append(cached)

    @wraps(loader)
    def load(*specs: ModelSpec | None) -> T:
        with _LOAD_LOCK:
            try:
                return cached(*specs)
            except Exception as err:
                if not _broken_files(err):
                    raise
                named = next((spec.local() for spec in specs if isinstance(spec, ModelSpec)), "?")
                reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
                raise UserError(f"model {named} cannot be loaded ({loader.__name__}): {reason}") from err

    return load


def release_models() -> int:
    """Forget every model this process loaded and return how many loads that was: a later call loads anew, and the
    memory is freed once no running task holds a model (torch's cached GPU blocks returned to the driver). Takes no
    lock: a load in flight meanwhile stays cached, for the task that asked for it."""
    released = sum(cached.cache_info().currsize for cached in _CACHES)
    for cached in _CACHES:
        cached.cache_clear()
    if released:
        gc.collect()  # modules hold reference cycles (hooks, tied weights)
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
    return released


def resolve_device(spec: ModelSpec) -> torch.device:
    import torch

    if spec.device != "auto":
        return torch.device(spec.device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    log.warning("no GPU found: %s runs on CPU", spec.id)
    return torch.device("cpu")


def visible_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES's entries when it is set (how dask-cuda and batch
    schedulers give each worker its GPU; torch then numbers them from 0), else every GPU torch sees."""
    pinned = os.environ.get("CUDA_VISIBLE_DEVICES")
    if pinned is not None:
        return [entry.strip() for entry in pinned.split(",") if entry.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def gpu_pinning_problem(devices_pinned: bool) -> str | None:
    """Why this process must not run the paper profile's models, in one line (None: it may): it sees no GPU, or
    several while some model is left to `device: auto` (every such model would share the first)."""
    gpus = visible_gpus()
    if not gpus:
        return "sees no GPU: the paper profile renders on GPUs (start this worker on a GPU host)"
    if len(gpus) > 1 and not devices_pinned:
        return (f"sees {len(gpus)} GPUs ({','.join(gpus)}) and some model has device: auto, so all of them would share "
                "the first: run one worker per GPU (`dask cuda worker ADDRESS --resources GPU=1`, or "
                "`CUDA_VISIBLE_DEVICES=i dask worker ADDRESS --resources GPU=1`) or set every model's device: cuda:i")
    return None


def resolve_dtype(spec: ModelSpec, device: torch.device) -> torch.dtype:
    """`auto` is fp32 on CPU, bf16 on GPUs that have it, fp16 on the others."""
    import torch

    if spec.dtype != "auto":
        return getattr(torch, spec.dtype)
    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def hub_kwargs(spec: ModelSpec) -> dict:
    return {"revision": spec.revision} if spec.revision else {}


@load_once
def load_pretrained(spec: ModelSpec, model_class: type[Any]) -> tuple:
    """(tokenizer, model in eval mode on its device and dtype) for a transformers `Auto*` model class."""
    from transformers import AutoTokenizer

    path, device = spec.local(), resolve_device(spec)
    tokenizer = AutoTokenizer.from_pretrained(path, **hub_kwargs(spec))
    model = model_class.from_pretrained(path, dtype=resolve_dtype(spec, device), **hub_kwargs(spec))
    return tokenizer, model.to(device).eval()


def set_torch_threads(threads: int | None) -> None:
    """Pin CPU intra-op threads for the calling thread (OpenMP settings are per thread); None keeps the default."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def thread_invariant_convolutions():
    """oneDNN off while a diffusion model renders (a context; the setting is the process's, restored after): its CPU
    convolutions round differently at different thread counts (measured with torch 2.15 on AVX2: every 1×1
    convolution, so a toy-world render moved by a pixel level in 1 sample of 6 between 1 and 2 threads; ~1.5×
    slower renders without it), while torch's own convolutions give the same bits at any count. Only around
    convolutions: a bfloat16 language model on CPU needs oneDNN's matrix products to run at usable speed. GPU kernels
    are not affected. Its other flags stay as they are (setting the TF32 one warns on every CPU build)."""
    import torch

    return torch.backends.mkldnn.flags(enabled=False, deterministic=None, allow_tf32=None, fp32_precision=None)


def compiled(module: M, mode: str | None) -> M:
    """`module` under `torch.compile` in `mode` (None: `module` itself, eager), writing nothing outside the project in
    whichever process compiles it (a Dask worker included): its kernels (and Triton's) go to `COMPILE_CACHE` instead
    of torch's default `$TMPDIR/torchinductor_<user>` (which importing torch's compiler writes into the environment),
    and C++ headers are not precompiled (torch puts them under that default whatever the environment says). A
    `TORCHINDUCTOR_CACHE_DIR` the user set is kept, with torch's defaults."""
    if mode is None:
        return module
    import torch
    import torch._inductor.config as inductor
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") in (None, default_cache_dir(), str(COMPILE_CACHE)):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(COMPILE_CACHE)
        inductor.cpp_cache_precompile_headers = False
    return cast(M, torch.compile(module, mode=mode))  # an OptimizedModule, called as the module is
