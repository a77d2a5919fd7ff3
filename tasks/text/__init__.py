"""Caption editing, the text half of a counterfactual: C_o -> noun sites -> masked-LM fills -> similarity window ->
the lowest-perplexity C_c. Each stage module has `run(frame, params, models)` and `load_models(params)`.

May import: `tasks.core`, `tasks.text`. Never `tasks.image` (a caption edit knows nothing of how it is rendered).

Importing this package imports NLTK without the optional libraries its `__init__` loads when they are installed
(scikit-learn and SciPy, for classifier wrappers and collocation statistics no stage calls): about 1 s of every
caption stage's start-up. Only the importing thread's imports of them fail meanwhile; afterwards they import as usual.
"""

from __future__ import annotations

import sys
import threading
from importlib.abc import MetaPathFinder

UNUSED_BY_NLTK = ("sklearn", "scipy")


class _Hidden(MetaPathFinder):
    """Refuses the first import of `names` in one thread (NLTK catches the ImportError and goes without them)."""

    def __init__(self, names: tuple[str, ...]):
        self.names, self.thread = names, threading.get_ident()

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self.names and threading.get_ident() == self.thread:
            raise ModuleNotFoundError(f"{fullname} is not loaded while NLTK imports", name=fullname)
        return None


if "nltk" not in sys.modules:
    _hidden = _Hidden(tuple(name for name in UNUSED_BY_NLTK if name not in sys.modules))
    sys.meta_path.insert(0, _hidden)
    try:
        import nltk  # noqa: F401
    finally:
        sys.meta_path.remove(_hidden)
