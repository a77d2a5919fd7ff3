"""Each edit type's text behaviours: one module per type of `tasks.core.edits`, named after it, defining the functions
its declaration says it has (`edits.behaviours`), looked up by name (`function`)."""

from __future__ import annotations

from collections.abc import Callable
from pkgutil import resolve_name

from tasks.core.edits import behaviour


def function(edit_type: str, name: str) -> Callable:
    """The type's behaviour `name` (`sites`, `check_fill`, `rewrite` or `defects`)."""
    return resolve_name(behaviour(edit_type, name))
