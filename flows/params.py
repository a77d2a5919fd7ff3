"""`cfgen params`: the whole params file is valid (its command validated every section, `tasks.config.load_params`);
the stamp it writes is the same bytes whatever the params, so a stage that depends on it reruns for its own params
only."""

from __future__ import annotations

from flows.engine.console import console
from tasks.core.params import Params
from tasks.core.writing import write_text

STAMP = "every section of the params file is valid\n"


def check_params(params: Params) -> str:
    """Write the stamp at `paths.params_checked`; returns its path."""
    write_text(params.paths.params_checked, STAMP)
    return str(params.paths.params_checked)


def show(stamp: str) -> None:
    console.print(f"params valid: {stamp}")
