"""What a `cfgen` process costs before its first line of work: `cfgen --help`, and each caption step that needs no
model folder (sites, relations) run on an empty input under one shared Prefect server (the tests' and `make demo`'s
set-up), with the import of its logic module in a fresh interpreter beside it. Median of `--runs`.

    python -m benchmarks.startup [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from tasks.core.source import ROOT
from tasks.stages import stage

STEPS = ("sites", "relations")  # caption steps whose models are the NLTK data only


def seconds(command: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return time.perf_counter() - began


def median(command: list[str], env: dict[str, str], runs: int) -> float:
    return statistics.median(seconds(command, env) for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    from flows.engine.server import prefect_api

    cfgen = [sys.executable, "-m", "flows.cli"]
    rows = [("cfgen --help", median([*cfgen, "--help"], dict(os.environ), runs), None)]
    with tempfile.TemporaryDirectory() as tmp, prefect_api() as url:
        env = {**os.environ, "PREFECT_API_URL": url}
        for name in STEPS:
            declared = stage(name)
            source = Path(tmp, f"{name}.in.parquet")
            pl.DataFrame(schema=declared.input).write_parquet(source)
            command = [*cfgen, name, str(source), str(Path(tmp, f"{name}.out.parquet"))]
            imports = median([sys.executable, "-c", f"import {declared.module}"], env, runs)
            rows.append((f"cfgen {name} (empty input)", median(command, env, runs), imports))
    print(f"| command | s (median of {runs}) | of which importing its logic, s |\n|---|---|---|")
    for command, wall, imports in rows:
        print(f"| {command} | {wall:.2f} | {'' if imports is None else f'{imports:.2f}'} |")


if __name__ == "__main__":
    main()
