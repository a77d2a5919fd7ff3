"""What every benchmark script shares: a typer CLI run offline, measurements in fresh processes, repeated runs that
alternate between the configurations compared, and rich tables of median (min–max) with a legend under each.

    from bench import (Repeats, alternating, commit, console, copy_checkout, in_fresh_process, peak_memory_mib, ratio,
                       run, spread, start, table, time_inside)

The convention: each measured configuration runs `--repeats` times (default 3), round-robin over the configurations
(A B A B A B, never A A A B B B), so drift on a shared machine hits every side alike; the i-th runs of all
configurations form one round. A quantity prints as its median (min–max) over the repeats; a ratio A / B prints as
the ratio of the medians, then the min–max of the per-round ratios A_i / B_i.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # benchmarks never download: models are built or given as folders
console = Console(width=200)
ROOT = Path(__file__).resolve().parents[1]
K, T = TypeVar("K"), TypeVar("T")
Repeats = Annotated[int, typer.Option(min=1, help="runs of each measured configuration, alternating between the "
                                                   "configurations (A B A B ...); tables print median (min–max)")]


def in_fresh_process(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a spawned process of its own, so its imports, caches and peak memory are its own."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def alternating(runs: Mapping[K, Callable[[], T]], repeats: int) -> dict[K, list[T]]:
    """Each configuration's `repeats` results, run round-robin: every round calls each configuration once, in the
    mapping's order, so the i-th results of two configurations are a pair measured side by side."""
    results: dict[K, list[T]] = {key: [] for key in runs}
    for _ in range(repeats):
        for key, run in runs.items():
            results[key].append(run())
    return results


def spread(values: Sequence[float], spec: str = ".2f") -> str:
    """`median (min–max)` of one quantity over the repeats."""
    return f"{statistics.median(values):{spec}} ({min(values):{spec}}–{max(values):{spec}})"


def ratio(numerators: Sequence[float], denominators: Sequence[float], spec: str = ".2f") -> str:
    """`A / B` as the ratio of the medians, then (min–max) of the per-round ratios A_i / B_i of paired runs; `–`
    when some B_i is 0."""
    if not all(denominators):
        return "–"
    paired = [a / b for a, b in zip(numerators, denominators, strict=True)]
    median = statistics.median(numerators) / statistics.median(denominators)
    return f"×{median:{spec}} ({min(paired):{spec}}–{max(paired):{spec}})"


def time_inside(owner: Any, name: str, spent: list[float]) -> None:
    """Wrap `owner.name` (a module's function, a class's method) so the seconds spent inside it add up in `spent[0]`:
    callers that look it up on `owner` at call time are timed in the process that runs them."""
    original = getattr(owner, name)

    @functools.wraps(original)  # the same module and name: a cache key reads the code by them
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - began
    setattr(owner, name, wrapper)


def copy_checkout(project: Path) -> Path:
    """`project`: this checkout's files (tracked, and untracked but not ignored; no dvc.lock), replacing it."""
    shutil.rmtree(project, ignore_errors=True)
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file() and not name.endswith("dvc.lock"):
            (project / name).parent.mkdir(parents=True, exist_ok=True)
            (project / name).write_bytes((ROOT / name).read_bytes())
    return project


def commit(project: Path, message: str) -> Path:
    """Make `project` a git repository with everything in it committed (DVC needs one)."""
    for command in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=bench", "-c", "user.email=b@localhost", "commit", "-qm", message]):
        subprocess.run(command, cwd=project, check=True)
    return project


def run(command: list[str], cwd: Path, env: dict) -> tuple[int, str, float, float]:
    """(exit code, output, wall seconds, peak RSS MiB of the command's largest process)."""
    started = time.monotonic()
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, output, time.monotonic() - started, usage.ru_maxrss / 1024


def peak_memory_mib() -> float:
    """Peak GPU memory allocated by this process when it used CUDA, else its peak resident set size."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def table(title: str, columns: Sequence[str], legend: Sequence[str] = ()) -> Table:
    """A results table: numbers right-aligned, a cell too wide folded onto more lines (never cut); `legend`, one line
    per entry, printed under it."""
    result = Table(title=title, caption="\n".join(legend) or None, caption_justify="left")
    for column in columns:
        result.add_column(column, justify="right", overflow="fold")
    return result


def start(main: Callable[..., None]) -> None:
    """The script's command line: `main`'s parameters as typer options."""
    typer.run(main)
