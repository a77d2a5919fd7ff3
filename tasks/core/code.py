"""Code identity, read from source and never by importing: what DVC tracks per stage and what a cache key holds.

Two granularities:
- `closure(module)` / `files(module)`: every project module a module can import, directly or through imports of
  imports, at module level or inside functions; the files a DVC stage depends on.
- `identity(*entries)`: what makes a cached unit's output: the functions it runs (`"module:name"`, read from the
  source, so a decorator or a patched name never moves the key), followed by name through every project function,
  class and constant they reach (imports of imports included), each as its normalised syntax tree (no comments,
  docstrings, annotations or formatting), plus the installed versions of the libraries that code imports. A param
  *definition* (a pydantic model) counts by name only: param values are keyed per stage, so a field added for
  another stage changes no key. A docstring or comment edit changes no key; an edit to anything the unit executes
  does; so does another version of a library it calls.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = ("tasks", "flows")
PARAM_BASES = {("pydantic", "BaseModel")}  # a class deriving from one of these is a param definition


def source_file(module: str) -> Path | None:
    """The `.py` file of a project module or package (its `__init__.py`) under ROOT, or None for anything else."""
    if module.split(".")[0] not in PROJECT_PACKAGES:
        return None
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=512)
def _parse(path: Path, stamp: tuple[int, int]) -> ast.Module:
    return ast.parse(path.read_bytes(), str(path))


def parse(path: Path) -> ast.Module:
    """The file's syntax tree, parsed again only when its size or mtime changed."""
    stat = path.stat()
    return _parse(path, (stat.st_mtime_ns, stat.st_size))


def _from_module(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The absolute module a `from ... import` names (relative imports resolved against `module`)."""
    if not node.level:
        return node.module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return importlib.util.resolve_name("." * node.level + (node.module or ""), package)


def import_bindings(module: str, path: Path, nodes: list[ast.stmt]) -> dict[str, tuple[str, str | None]]:
    """Local name -> (module, attribute or None) for the import statements among `nodes` (relative imports resolved
    against `module`; `import a.b` binds `a`)."""
    bound = {}
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
    found = set()
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
        todo.extend(parents + sorted(n for n in imported(name, source_file(name)) if source_file(n)))
    return tuple(sorted(seen))


def files(module: str) -> list[str]:
    """The closure's source files relative to ROOT (POSIX), as `dvc.yaml` lists them."""
    return sorted(source_file(m).relative_to(ROOT).as_posix() for m in closure(module))


# --- identity: the functions a unit runs -------------------------------------------------------------------------


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
    path = source_file(name)
    statements = list(_top_level(parse(path).body))
    definitions: dict[str, list[ast.stmt]] = {}
    effects = []
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            definitions.setdefault(node.name, []).append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and (bound := _bound_names(node)):
            for target in bound:
                definitions.setdefault(target, []).append(node)
        elif not isinstance(node, (ast.Import, ast.ImportFrom)) and not _is_docstring(node):
            effects.append(node)
    return Module(name, definitions, import_bindings(name, path, statements), effects)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def normalised(node: ast.AST) -> str:
    """The node's syntax tree without docstrings, annotations, positions or comments: what runs, not how it reads."""
    node = copy.deepcopy(node)
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            if sub.body and _is_docstring(sub.body[0]):
                sub.body = sub.body[1:] or [ast.Pass()]
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sub.returns = None
        elif isinstance(sub, ast.arg):
            sub.annotation = None
        elif isinstance(sub, ast.AnnAssign):
            sub.annotation = ast.Constant(None)
    return ast.dump(node, annotate_fields=False, include_attributes=False)


def _references(node: ast.AST) -> Iterator[list[str]]:
    """Dotted name chains the node reads (`render.canonical` -> ["render", "canonical"]), annotations excluded."""
    if isinstance(node, ast.Attribute):
        chain, value = [node.attr], node.value
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if isinstance(value, ast.Name):
            yield [value.id, *chain]
            return
    elif isinstance(node, ast.Name):
        yield [node.id]
        return
    for name, child in ast.iter_fields(node):
        if name in ("annotation", "returns"):
            continue
        for item in child if isinstance(child, list) else [child]:
            if isinstance(item, ast.AST):
                yield from _references(item)


@dataclass
class Walk:
    """The project definitions and libraries reached from some entry points."""

    parts: dict[str, str] = field(default_factory=dict)  # "module:name" -> normalised source (or a param marker)
    libraries: set[str] = field(default_factory=set)  # top-level import names outside the project
    modules: dict[str, Module] = field(default_factory=dict)

    def module(self, name: str) -> Module:
        if name not in self.modules:
            self.modules[name] = module = read_module(name)
            if module.effects:
                self.parts[f"{name}:<effects>"] = "".join(normalised(n) for n in module.effects)
            for node in module.effects:
                self.follow_node(module, node, {})
        return self.modules[name]

    def follow_node(self, module: Module, node: ast.AST, local: dict[str, tuple[str, str | None]]) -> None:
        local = {**local, **import_bindings(module.name, source_file(module.name),
                                            [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))])}
        for chain in _references(node):
            self.resolve(module, chain, local)

    @staticmethod
    def target(module: Module, chain: list[str],
               local: dict[str, tuple[str, str | None]]) -> tuple[str, list[str]] | None:
        """(module, the names read in it) that a dotted chain read in `module` names, through an import (`local`
        ones first) or one of its own definitions; None for anything else (a builtin, a local variable)."""
        head, rest = chain[0], chain[1:]
        if head in local or head in module.imports:
            target, attribute = local.get(head) or module.imports[head]
            return target, ([attribute] if attribute else []) + rest
        return (module.name, chain) if head in module.definitions else None

    @staticmethod
    def descend(target: str, rest: list[str]) -> tuple[str, list[str]]:
        """`target.rest...` with every leading project submodule of `rest` moved into the module name."""
        while rest and source_file(f"{target}.{rest[0]}"):
            target, rest = f"{target}.{rest[0]}", rest[1:]
        return target, rest

    def resolve(self, module: Module, chain: list[str], local: dict[str, tuple[str, str | None]]) -> None:
        if found := self.target(module, chain, local):
            self.reach_module(*found)

    def reach_module(self, target: str, rest: list[str]) -> None:
        """`target.rest[0].rest[1]...`: a project module's definition, a whole project module, or a library."""
        if source_file(target) is None:
            if target.split(".")[0] not in PROJECT_PACKAGES:
                self.libraries.add(target.split(".")[0])
            return
        target, rest = self.descend(target, rest)
        if rest:
            self.definition(target, rest[0])
        else:  # a module used as a value: anything in it may run
            for name in self.module(target).definitions:
                self.definition(target, name)

    def definition(self, module_name: str, name: str) -> None:
        key = f"{module_name}:{name}"
        if key in self.parts:
            return
        module = self.module(module_name)
        if name not in module.definitions:
            if name in module.imports:  # re-exported
                self.parts[key] = "import"
                self.resolve(module, [name], {})
            return
        if self.is_param_class(module, name):
            self.parts[key] = "param definition"
            return
        nodes = module.definitions[name]
        self.parts[key] = "".join(normalised(n) for n in nodes)
        for node in nodes:
            self.follow_node(module, node, {})

    def is_param_class(self, module: Module, name: str) -> bool:
        """A class deriving, at any depth, from a `PARAM_BASES` class."""
        nodes = module.definitions.get(name, [])
        if not (len(nodes) == 1 and isinstance(nodes[0], ast.ClassDef)):
            return False
        for base in nodes[0].bases:
            found = (chain := next(_references(base), None)) and self.target(module, chain, {})
            if not found or not found[1]:
                continue
            target, parts = found
            if (target, parts[-1]) in PARAM_BASES:
                return True
            if source_file(target):
                owner, rest = self.descend(target, parts)
                if rest and self.is_param_class(self.module(owner), rest[0]):
                    return True
        return False


@cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def library_versions(top_level: set[str]) -> dict[str, str]:
    """Distribution name -> installed version, for the non-stdlib top-level modules `top_level`, read now."""
    found = {}
    for name in sorted(top_level - set(sys.stdlib_module_names)):
        for distribution in _distributions().get(name, []):
            found[distribution.lower()] = importlib.metadata.version(distribution)
    return dict(sorted(found.items()))


@dataclass(frozen=True)
class Identity:
    """`key`: a hash over the reached code and library versions; `libraries`: those versions; `parts`: what it hashed
    per definition (for explaining a key change)."""

    key: str
    libraries: dict[str, str]
    parts: dict[str, str]


def identity(*entries: str) -> Identity:
    """What the project functions or classes `"module:name"` run: see the module docstring."""
    walk = Walk()
    for entry in sorted(set(entries)):
        walk.definition(*entry.split(":"))
    libraries, parts = library_versions(walk.libraries), dict(sorted(walk.parts.items()))
    h = hashlib.blake2b(digest_size=16)
    for name, part in parts.items():
        h.update(f"{name}\0{part}\0".encode())
    for distribution, version in libraries.items():
        h.update(f"{distribution}=={version}\0".encode())
    return Identity(h.hexdigest(), libraries, parts)
