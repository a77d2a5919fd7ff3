"""Loaded by every Python process started with this folder on PYTHONPATH (the DVC test's first `dvc repro`). In a
DVC stage's process (`DVC_STAGE` set) and with `CFGEN_TRACE_DIR` set, it records what the stage really reads:

- every file opened (Python's `open` audit event), with whether for reading, and every source polars reads or scans
  (its Rust reader opens files unseen by Python);
- every project module it imported (`tasks.*`, `flows.*`, however imported: an entry point's `load` too), as its
  source file;
- every params key read: a field of the typed params (`tasks.core.fields.Frozen`) reached from `Params`, as its
  dotted path (`generate.steps`), the path carried from parent to child as attributes are read; leaves apart from
  sections (`generate.clip`: read whole when a spec is compared, dumped or hashed).

At exit it writes `$CFGEN_TRACE_DIR/<stage>/<pid>.json` (`/` and `:` in the folder name as `__`; the record names
its stage as DVC does).
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import sys

STAGE, OUT = os.environ.get("DVC_STAGE"), os.environ.get("CFGEN_TRACE_DIR")
opened: dict[str, bool] = {}  # path -> opened for reading at least once
keys: set[str] = set()  # leaf fields read
nodes: set[str] = set()  # sections read as a whole or on the way to a leaf
paths: dict[int, str] = {}  # id(params node) -> its dotted path ("" for the root)
loading = False  # inside load_params
validators: set[str] | None = None  # names of the params models' validators


def _audit(event: str, args: tuple) -> None:
    if event == "open" and isinstance(args[0], str):
        mode, flags = args[1], args[2]
        if isinstance(flags, int) and flags & os.O_DIRECTORY:
            return  # a folder held for a publication (`tasks.core.writing`), not data read
        reading = ("r" in mode and "+" not in mode) if isinstance(mode, str) else not flags & (os.O_WRONLY | os.O_RDWR)
        opened[args[0]] = opened.get(args[0], False) or reading


def _path(node) -> str | None:
    """The dotted path of a params node reached from the root (`Params` itself: "")."""
    if type(node).__name__ == "Params":
        paths.setdefault(id(node), "")
    return paths.get(id(node))


def _validating(frozen: type, depth: int = 6) -> bool:
    """Whether a params validator (a pydantic model or field validator of any params model) is among the nearest
    callers: its reads (the paper profile's pin check, run again when Prefect validates a flow's parameters) are not
    the stage's."""
    global validators
    if validators is None:  # every params model is defined once params have loaded
        validators, todo = set(), [frozen]
        while todo:
            cls = todo.pop()
            validators |= {*cls.__pydantic_decorators__.model_validators, *cls.__pydantic_decorators__.field_validators}
            todo += cls.__subclasses__()
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code.co_name in validators:
            return True
        frame = frame.f_back
    return False


def _by_project_code() -> bool:
    """Whether the nearest caller outside pydantic is cfgen's own code (not Prefect storing a flow's parameters)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("pydantic"):
        frame = frame.f_back
    return frame is not None and frame.f_globals.get("__name__", "").startswith(("tasks.", "flows."))


def _record(frozen: type) -> None:
    """Wrap the params models' base (`frozen`): a field read notes its dotted path (a leaf as a key, a section as a
    node whose path its own fields inherit); `model_dump*` notes the section as read whole ("*" for the root);
    iterating a section (as `model_specs` does to find models) only passes paths on. Reads while params are loaded
    and validated (`load_params`) are not the stage's."""
    plain, iterate = frozen.__getattribute__, frozen.__iter__

    def note(node, name, value) -> None:
        if not loading and (at := _path(node)) is not None and not _validating(frozen):
            dotted = f"{at}.{name}" if at else name
            if isinstance(value, frozen):
                paths[id(value)] = dotted
                nodes.add(dotted)
            else:
                keys.add(dotted)

    def getattribute(self, name):
        value = plain(self, name)
        if not name.startswith("_") and name in type(self).model_fields:
            note(self, name, value)
        return value

    def walk(self):
        for name, value in iterate(self):
            if isinstance(value, frozen) and not loading and (at := _path(self)) is not None:
                paths[id(value)] = f"{at}.{name}" if at else name
            yield name, value

    def whole(method):
        def dump(self, *args, **kwargs):
            if not loading and (at := _path(self)) is not None and _by_project_code():
                nodes.add(at or "*")
            return method(self, *args, **kwargs)

        return dump

    frozen.__getattribute__, frozen.__iter__ = getattribute, walk
    frozen.model_dump, frozen.model_dump_json = whole(frozen.model_dump), whole(frozen.model_dump_json)


def _loading(config) -> None:
    """Wrap `load_params`: its own reads (validators, the paper profile's pin check) are not the stage's."""
    load = config.load_params

    def load_params(*args, **kwargs):
        global loading
        loading = True
        try:
            return load(*args, **kwargs)
        finally:
            loading = False

    config.load_params = load_params


def _record_sources(polars) -> None:
    """Wrap polars' `read_*` / `scan_*` to note their source path(s) as read."""

    def wrap(reader):
        def read(source, *args, **kwargs):
            for one in source if isinstance(source, (list, tuple)) else [source]:
                if isinstance(one, (str, os.PathLike)):
                    opened[os.fspath(one)] = True
            return reader(source, *args, **kwargs)

        return read

    for name in dir(polars):
        if name.startswith(("read_", "scan_")) and callable(getattr(polars, name)):
            setattr(polars, name, wrap(getattr(polars, name)))


PATCHES = {"tasks.core.fields": lambda module: _record(module.Frozen), "tasks.config": _loading,
           "polars": _record_sources}


class _Patch(importlib.abc.MetaPathFinder):
    """Patches each module of `PATCHES` when it is first imported (importing it here would change what the stage
    imports, which the same test traces)."""

    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module
        return spec


def _write() -> None:
    folder = os.path.join(OUT, STAGE.replace("/", "__").replace(":", "__"))
    os.makedirs(folder, exist_ok=True)
    files = {os.path.abspath(p): reading for p, reading in opened.items()}
    with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
        json.dump({"stage": STAGE, "argv": sys.argv, "keys": sorted(keys), "nodes": sorted(nodes),
                   "read": sorted(p for p, r in files.items() if r), "modules": sorted(
                       os.path.abspath(m.__file__) for name, m in list(sys.modules.items())
                       if name.split(".")[0] in ("tasks", "flows") and getattr(m, "__file__", None))}, f)


if STAGE and OUT:
    sys.addaudithook(_audit)
    sys.meta_path.insert(0, _Patch())
    atexit.register(_write)
