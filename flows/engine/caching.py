"""Prefect's side of the one key builder (`tasks.core.keys`): one cache policy, one decorator for every task that
persists a unit's result.

A unit task takes a `unit` (`keys.Unit`, built once per run where the run is submitted) and a `content` (a digest of
its own input); its key is `unit.key(content)`, computed where the task runs, and its body runs only in a process
whose code is the code the unit was keyed with (`Unit.check`: else one line, "restart the workers").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from prefect import task
from prefect.cache_policies import CachePolicy


@dataclass
class UnitKey(CachePolicy):
    """The task's `unit` input's key of its `content` input."""

    def compute_key(self, task_ctx, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any) -> str:
        return inputs["unit"].key(inputs["content"])


def unit_task(fn: Callable) -> Callable:
    """`fn` as a Prefect task keyed by `UnitKey`, its result persisted, refusing stale code before it computes."""
    signature = inspect.signature(fn)

    @wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        signature.bind(*args, **kwargs).arguments["unit"].check()
        return fn(*args, **kwargs)

    return task(cache_policy=UnitKey(), persist_result=True)(checked)
