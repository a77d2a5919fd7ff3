"""Each edit type's text behaviours: one module per type of `tasks.core.edits`, named after it, defining the functions
its declaration says it has (`edits.behaviours`), looked up by name (`function`). Every declared type's module is
imported with this package, so what a step imports never depends on which types its cache already held."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from tasks.core.edits import EDIT_TYPES

MODULES = {name: importlib.import_module(f"{__name__}.{name}") for name in EDIT_TYPES}


def function(edit_type: str, name: str) -> Callable:
    """The type's behaviour `name` (`sites`, `check_fill`, `rewrite` or `defects`)."""
    return getattr(MODULES[edit_type], name)
