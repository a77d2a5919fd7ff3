"""What a `cfgen` process costs before its first line of work: `cfgen --help`, and each caption step that needs no
model folder (sites, relations) run on an empty input under one shared Prefect server (the tests' and `make demo`'s
set-up), with the import of its logic module in a fresh interpreter beside it.

    python benchmarks/startup.py [--repeats 5]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import polars as pl
from bench import ROOT, Repeats, alternating, console, run, spread, start, table

from tasks.stages import stage

STEPS = ("sites", "relations")  # caption steps whose models are the NLTK data only


def wall(command: list[str], env: dict[str, str]) -> float:
    code, output, seconds, _ = run(command, ROOT, env)
    if code:
        raise SystemExit(f"{' '.join(command)} failed: {(output.strip().splitlines() or ['no output'])[-1]}")
    return seconds


def main(repeats: Repeats = 5) -> None:
    from flows.engine.server import prefect_api

    cfgen = [sys.executable, "-m", "flows.cli"]
    with tempfile.TemporaryDirectory() as tmp, prefect_api() as url:
        env = {**os.environ, "PREFECT_API_URL": url}
        runs = {("cfgen --help", "run"): lambda: wall([*cfgen, "--help"], env)}
        for name in STEPS:
            declared = stage(name)
            source = Path(tmp, f"{name}.in.parquet")
            pl.DataFrame(schema=declared.input).write_parquet(source)
            command = [*cfgen, name, str(source), str(Path(tmp, f"{name}.out.parquet"))]
            runs[(f"cfgen {name} (empty input)", "run")] = lambda command=command: wall(command, env)
            runs[(f"cfgen {name} (empty input)", "import")] = lambda module=declared.module: wall(
                [sys.executable, "-c", f"import {module}"], env)
        seconds = alternating(runs, repeats)
    result = table(f"start-up, s: median (min–max) of {repeats}", ["command", "process", "importing its logic"],
                   ["process: the command's wall time, start to exit, on the shared server",
                    "importing its logic: `python -c 'import MODULE'` of the stage's logic, in a fresh interpreter"])
    for command in dict.fromkeys(label for label, _ in seconds):
        imports = seconds.get((command, "import"))
        result.add_row(command, spread(seconds[(command, "run")]), spread(imports) if imports else "")
    console.print(result)


if __name__ == "__main__":
    start(main)
