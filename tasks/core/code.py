"""Code identity: the project modules a module can execute, found by reading imports, never by importing.

`closure("tasks.generate")` is the module plus every project module it imports, directly or through imports of
imports, at module level or inside functions (both can run). `code_digest` hashes their source files, so editing any
of them, however deep, changes the digest, and editing any other module does not.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = ("tasks", "flows")


def source_file(module: str) -> Path | None:
    """The `.py` file of a project module or package (its `__init__.py`) under ROOT, or None for anything else."""
    if module.split(".")[0] not in PROJECT_PACKAGES:
        return None
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported(module: str, path: Path) -> set[str]:
    """Every absolute name the import statements of one file name, at any depth (`from pkg import x` names `pkg` and
    `pkg.x`; relative imports resolved against `module`)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level \
                else node.module
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
        todo.extend(parents + sorted(n for n in imported(name, source_file(name)) if source_file(n)))
    return tuple(sorted(seen))


def files(module: str) -> list[str]:
    """The closure's source files relative to ROOT (POSIX), as `dvc.yaml` lists them."""
    return sorted(source_file(m).relative_to(ROOT).as_posix() for m in closure(module))


def code_digest(*modules: str) -> str:
    """blake2b over (name, source bytes) of the closures of `modules`: changes exactly when one of those files does."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted({m for module in modules for m in closure(module)}):
        h.update(name.encode() + b"\0" + source_file(name).read_bytes() + b"\0")
    return h.hexdigest()
