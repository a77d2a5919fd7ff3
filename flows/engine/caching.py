"""Prefect's side of the one key builder (`tasks.core.keys`): one cache policy, one decorator for every task that
persists a unit's result, and one place that binds such a task to the run's result store.

A unit task takes a `unit` (`keys.Unit`, built once per run where the run is submitted) and a `content` (a digest of
its own input); its key is `unit.key(content)`, computed where the task runs, and its body runs only in a process
whose code is the code the unit was keyed with (`Unit.check`: else one line, "restart the workers").

In a store, a key is computed by one task run at a time (Prefect's SERIALIZABLE isolation over `KeyLocks`): runs
that share the store (two workers of a deployment, queued experiments, Dask workers on other hosts) wait for the
first and read its result, so nothing is computed twice; a killed holder's lock dies with its process.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout
from prefect import task
from prefect.cache_policies import CachePolicy

from flows.engine.workspace import result_store

if TYPE_CHECKING:
    from typing import ParamSpec, TypeVar

    from prefect import Task

    from tasks.stages import Params

    P = ParamSpec("P")
    R = TypeVar("R")

_held: dict[Path, tuple[str, FileLock]] = {}  # lock file -> (holder, its lock), this process's


@dataclass
class UnitKey(CachePolicy):
    """The task's `unit` input's key of its `content` input."""

    def compute_key(self, task_ctx, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any) -> str:
        return inputs["unit"].key(inputs["content"])


@dataclass(frozen=True)
class KeyLocks:
    """Prefect's `LockManager` over one `flock`ed file per key under `folder`: the OS drops a lock when its process
    dies, so a killed worker never strands a key (Prefect's file lock manager keeps it until it expires, by default
    never). `hold_timeout` is not needed for that and is ignored."""

    folder: Path

    def _file(self, key: str) -> Path:
        return self.folder / f"{key}.lock"

    def acquire_lock(self, key: str, holder: str, acquire_timeout: float | None = None,
                     hold_timeout: float | None = None) -> bool:
        if self.is_lock_holder(key, holder):
            return True
        self.folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self._file(key), thread_local=False)
        try:
            lock.acquire(timeout=-1 if acquire_timeout is None else acquire_timeout)
        except Timeout:
            return False
        _held[self._file(key)] = (holder, lock)
        return True

    def release_lock(self, key: str, holder: str) -> None:
        if not self.is_lock_holder(key, holder):
            raise ValueError(f"{holder} does not hold the lock of {key}")
        _held.pop(self._file(key))[1].release()

    def is_locked(self, key: str) -> bool:
        return self._file(key) in _held or not self.wait_for_lock(key, 0)

    def is_lock_holder(self, key: str, holder: str) -> bool:
        return _held.get(self._file(key), ("",))[0] == holder

    def wait_for_lock(self, key: str, timeout: float | None = None) -> bool:
        if not self._file(key).exists():
            return True
        try:
            with FileLock(self._file(key), thread_local=False).acquire(timeout=-1 if timeout is None else timeout):
                return True
        except Timeout:
            return False

    async def aacquire_lock(self, key: str, holder: str, acquire_timeout: float | None = None,
                            hold_timeout: float | None = None) -> bool:
        return await asyncio.to_thread(self.acquire_lock, key, holder, acquire_timeout, hold_timeout)

    async def await_for_lock(self, key: str, timeout: float | None = None) -> bool:
        return await asyncio.to_thread(self.wait_for_lock, key, timeout)


def unit_task(fn: Callable[P, R]) -> Task[P, R]:
    """`fn` as a Prefect task keyed by `UnitKey`, its result persisted, refusing stale code before it computes."""
    signature = inspect.signature(fn)

    @wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        signature.bind(*args, **kwargs).arguments["unit"].check()
        return fn(*args, **kwargs)

    return task(cache_policy=UnitKey(), persist_result=True)(checked)


def in_store(unit: Task[P, R], params: Params, **options: Any) -> Task[P, R]:
    """The unit task `unit` persisting to the run's result store, each key computed once across every run sharing
    it (`KeyLocks` in its `locks/`)."""
    store = result_store(params)
    policy = UnitKey().configure(lock_manager=KeyLocks(store / "locks"), isolation_level="SERIALIZABLE")
    return unit.with_options(result_storage=store, cache_policy=policy, **options)
