"""Project source as this process runs it: where a module's file is, its syntax tree, what it imports.

A project module's bytes are recorded when this process imports it (`record_imports`, installed by `tasks`), and
`parse` reads those bytes rather than the file on disk: after a `git pull`, a long-lived process (a Dask worker)
still parses the code it runs, so its code identity differs from a fresh checkout's. A module not imported yet is
read from disk, as importing it would.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"  # every cache the project and its libraries write: nothing goes outside the project
COMPILE_CACHE = CACHE / "torchinductor"  # torch.compile's kernels, unless TORCHINDUCTOR_CACHE_DIR says
PROJECT_PACKAGES = ("tasks", "flows")
IMPORTED: dict[Path, bytes] = {}  # a project file -> its bytes when this process imported it


def source_file(module: str) -> Path | None:
    """The `.py` file of a project module or package (its `__init__.py`) under ROOT, or None for anything else."""
    if module.split(".")[0] not in PROJECT_PACKAGES:
        return None
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


class _Recorder(importlib.abc.MetaPathFinder):
    """Records a project module's bytes as the import system is about to load it; finds nothing itself."""

    def find_spec(self, name, path, target=None):
        if (file := source_file(name)) is not None:
            IMPORTED.setdefault(file, file.read_bytes())
        return None


def record_imports() -> None:
    """From now on, record each project module this process imports (and those it already has)."""
    if not any(isinstance(finder, _Recorder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Recorder())
    for name in list(sys.modules):
        if (file := source_file(name)) is not None:
            IMPORTED.setdefault(file, file.read_bytes())


@lru_cache(maxsize=512)
def _parse(path: Path, source: bytes) -> ast.Module:
    return ast.parse(source, str(path))


def parse(path: Path) -> ast.Module:
    """The file's syntax tree as this process imported it (else as on disk)."""
    return _parse(path, IMPORTED.get(path) or path.read_bytes())


def _from_module(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The absolute module a `from ... import` names (relative imports resolved against `module`)."""
    if not node.level:
        return cast(str, node.module)  # an absolute `from` import names its module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return importlib.util.resolve_name("." * node.level + (node.module or ""), package)


def import_bindings(module: str, path: Path, nodes: list[ast.stmt]) -> dict[str, tuple[str, str | None]]:
    """Local name -> (module, attribute or None) for the import statements among `nodes` (relative imports resolved
    against `module`; `import a.b` binds `a`)."""
    bound: dict[str, tuple[str, str | None]] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = (alias.name if alias.asname
                                                                   else alias.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom):
            base = _from_module(node, module, path)
            bound.update({alias.asname or alias.name: (base, alias.name) for alias in node.names})
    return bound


def imported(module: str, path: Path) -> set[str]:
    """Every absolute name the import statements of one file name, at any depth (`from pkg import x` names `pkg` and
    `pkg.x`; relative imports resolved against `module`)."""
    found: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_module(node, module, path)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def closure(module: str) -> tuple[str, ...]:
    """`module` and every project module reachable through its imports (parent packages included), sorted."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parents = [name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)]
        todo.extend(parents + sorted(n for n in imported(name, cast(Path, source_file(name))) if source_file(n)))
    return tuple(sorted(seen))


def files(module: str) -> list[str]:
    """The closure's source files relative to ROOT (POSIX), as `dvc.yaml` lists them."""
    return sorted(cast(Path, source_file(m)).relative_to(ROOT).as_posix() for m in closure(module))


@dataclass
class Module:
    """One project module's top level: what each name is bound to, and the statements that run on import."""

    name: str
    definitions: dict[str, list[ast.stmt]]
    imports: dict[str, tuple[str, str | None]]
    effects: list[ast.stmt]


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Top-level statements, with the blocks of `if` / `try` (conditional imports and definitions) inlined."""
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            handlers = [s for h in getattr(node, "handlers", []) for s in h.body]
            yield from _top_level(node.body + node.orelse + handlers + getattr(node, "finalbody", []))
        else:
            yield node


def _bound_names(node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> set[str] | None:
    """The names an assignment binds, or None when it also assigns to anything else (an attribute, an item)."""
    nodes = [n for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) for n in ast.walk(t)]
    if not all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Starred, ast.expr_context)) for n in nodes):
        return None
    return {n.id for n in nodes if isinstance(n, ast.Name)}


def read_module(name: str) -> Module:
    path = cast(Path, source_file(name))  # a project module's
    statements = list(_top_level(parse(path).body))
    definitions: dict[str, list[ast.stmt]] = {}
    effects = []
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            definitions.setdefault(node.name, []).append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and (bound := _bound_names(node)):
            for target in bound:
                definitions.setdefault(target, []).append(node)
        elif not isinstance(node, (ast.Import, ast.ImportFrom)) and not is_docstring(node):
            effects.append(node)
    return Module(name, definitions, import_bindings(name, path, statements), effects)


def is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def check_entry(name: str) -> None:
    """Raise ValueError unless `"module:name"` names a top-level definition (or import) of a project module, read from
    its source (nothing imported)."""
    module_name, _, attribute = name.partition(":")
    module = read_module(module_name) if source_file(module_name) else None
    if module is None or attribute not in module.definitions | module.imports:
        raise ValueError(f"code entry {name}: {module_name} defines no {attribute} (renamed?)")
