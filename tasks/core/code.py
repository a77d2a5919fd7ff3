"""Code identity (`identity(*entries)`): what makes a cached unit's output, besides its input and params.

It follows, by name, the functions a unit runs (`"module:name"`, read from the source as this process imported it:
`tasks.core.source`; a decorator or a patched name never moves it) through every project function, class and
constant they reach (imports of imports included), each as its normalised syntax tree: no comments, docstrings,
annotations or formatting, and no text of a log call or an exception message. Beside the code: the installed
versions of the distributions that code imports and of everything they require, and the NLTK data a reached module
names in `NLTK_RESOURCES` (`tasks.core.environment`). A param *definition* (a pydantic model) counts by name only:
param values are keyed per unit, so a field added for another stage changes no key.
"""

from __future__ import annotations

import ast
import copy
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard, cast

from tasks.core.environment import data_hashes, library_versions
from tasks.core.source import (
    PROJECT_PACKAGES,
    Module,
    check_entry,
    import_bindings,
    is_docstring,
    read_module,
    source_file,
)

PARAM_BASES = {("pydantic", "BaseModel")}  # a class deriving from one of these is a param definition
LOGGERS = {"log", "logger", "logging", "warnings"}  # receivers of a log call, besides get_run_logger() / getLogger()
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}
DATA = "NLTK_RESOURCES"  # a module-level tuple of the NLTK resources a module reads


# --- identity: the functions a unit runs -------------------------------------------------------------------------


def entry(code: Callable) -> str:
    """`module:qualname` of a function or class: how `identity` names it."""
    return f"{code.__module__}:{code.__qualname__}"


def _is_log_call(node: ast.AST) -> TypeGuard[ast.Call]:
    """`log.info(...)`, `warnings.warn(...)`, `get_run_logger().info(...)` and the like."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOG_METHODS):
        return False
    receiver = node.func.value
    if isinstance(receiver, ast.Call) and isinstance(receiver.func, (ast.Name, ast.Attribute)):
        return getattr(receiver.func, "id", getattr(receiver.func, "attr", None)) in {"get_run_logger", "getLogger"}
    return isinstance(receiver, ast.Name) and receiver.id in LOGGERS


class _Blank(ast.NodeTransformer):
    """Every string literal and f-string made one empty string: messages, not behaviour."""

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.Constant:
        return ast.Constant("")

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        return ast.Constant("") if isinstance(node.value, str) else node


def _blank_arguments(call: ast.Call) -> None:
    """The call's arguments without their text, in place."""
    call.args = [_Blank().visit(argument) for argument in call.args]
    for keyword in call.keywords:
        keyword.value = _Blank().visit(keyword.value)


def normalised(node: ast.AST) -> str:
    """The node's syntax tree without docstrings, annotations, positions, comments, or the text of log calls and
    exception messages: what runs, not how it reads."""
    node = copy.deepcopy(node)
    for sub in ast.walk(node):
        if _is_log_call(sub):
            _blank_arguments(sub)
        elif isinstance(sub, ast.Raise) and isinstance(sub.exc, ast.Call):
            _blank_arguments(sub.exc)
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            if sub.body and is_docstring(sub.body[0]):
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
    data: set[str] = field(default_factory=set)  # NLTK resources
    modules: dict[str, Module] = field(default_factory=dict)

    def module(self, name: str) -> Module:
        if name not in self.modules:
            self.modules[name] = module = read_module(name)
            for node in module.definitions.get(DATA, []):
                self.data.update(ast.literal_eval(cast(ast.Assign, node).value))
            if module.effects:
                self.parts[f"{name}:<effects>"] = "".join(normalised(n) for n in module.effects)
            for node in module.effects:
                self.follow_node(module, node, {})
        return self.modules[name]

    def follow_node(self, module: Module, node: ast.AST, local: dict[str, tuple[str, str | None]]) -> None:
        local = {**local, **import_bindings(module.name, cast(Path, source_file(module.name)),
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


@dataclass(frozen=True)
class Identity:
    """`key`: a hash over the reached code, library versions and data; `libraries`, `data`: those versions and data
    hashes; `imported`: the versions of the distributions the code imports by name (provenance); `parts`: what it
    hashed per definition (for explaining a key change)."""

    key: str
    libraries: dict[str, str]
    imported: dict[str, str]
    data: dict[str, str]
    parts: dict[str, str]


def identity(*entries: str) -> Identity:
    """What the project functions or classes `"module:name"` run: see the module docstring."""
    walk = Walk()
    for name in sorted(set(entries)):
        check_entry(name)
        walk.definition(*name.split(":"))
    (libraries, imported), data = library_versions(walk.libraries), data_hashes(walk.data)
    parts = dict(sorted(walk.parts.items()))
    h = hashlib.blake2b(digest_size=16)
    for name, part in parts.items():
        h.update(f"{name}\0{part}\0".encode())
    for distribution, version in libraries.items():
        h.update(f"{distribution}=={version}\0".encode())
    for resource, digest in data.items():
        h.update(f"{resource}#{digest}\0".encode())
    return Identity(h.hexdigest(), libraries, imported, data, parts)
