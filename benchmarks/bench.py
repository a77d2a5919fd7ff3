"""What every benchmark script shares: a typer CLI run offline, measurements in fresh processes, rich tables.

    from bench import console, in_fresh_process, peak_memory_mib, start, table
"""

from __future__ import annotations

import multiprocessing
import os
import resource
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # benchmarks never download: models are built or given as folders
console = Console(width=200)


def in_fresh_process(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a spawned process of its own, so its imports, caches and peak memory are its own."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def peak_memory_mib() -> float:
    """Peak GPU memory allocated by this process when it used CUDA, else its peak resident set size."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def table(title: str, columns: Sequence[str]) -> Table:
    """A results table: numbers right-aligned."""
    result = Table(title=title)
    for column in columns:
        result.add_column(column, justify="right")
    return result


def start(main: Callable[..., None]) -> None:
    """The script's command line: `main`'s parameters as typer options."""
    typer.run(main)
