"""Each DVC stage's code deps, as a traced `dvc repro` saw its processes import them (`sitecustomize.py`).

    python -m tools.tracing.code_deps TRACE REPO

rewrites the code entries (`flows/`, `tasks/`) of every stage's `deps:` in this project's `dvc.yaml` and
`demo/dvc.yaml` to what the stage imported in the traced copy REPO, less the modules that run nothing but a docstring
(a package's `__init__.py` that only describes it: no edit to it changes what a stage computes, so none reruns one);
its other deps (data) are kept, first. Every
`deps:` is written in one canonical flow style, a line per package folder, so one stage reads in one screen; the
DVC test prints this command, with its own TRACE and REPO, when a stage's code deps are wrong.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from itertools import groupby
from pathlib import Path, PurePosixPath

import yaml

CODE = ("flows/", "tasks/")
FILES = {"dvc.yaml": "", "demo/dvc.yaml": "demo/dvc.yaml:"}  # file -> how DVC prefixes its stages' names
KINDS = ("keys", "nodes", "read", "modules")  # what a traced process records besides its stage and argv
WIDTH = 120
INDENT = " " * 6


def is_code(dep: str) -> bool:
    """A traced code dep; not one DVC interpolates (the chosen backend's module: kept, as data deps are)."""
    return dep.startswith(CODE) and dep.endswith(".py") and "${" not in dep


def deps_lines(deps: list[str], notes: dict[str, str]) -> list[str]:
    """`deps:` in flow style, wrapped at WIDTH: the data deps (one with a note alone on its line, the note kept),
    then, from a new line, the code, each folder on a new line unless it fits whole on the line before."""
    code = sorted(d for d in deps if is_code(d))
    lines = ["    deps: [", *wrap([[f'"{d}"'] for d in deps if not is_code(d)], notes),
             *wrap([list(g) for _, g in groupby(code, key=lambda d: PurePosixPath(d).parent)], {})]
    body, _, note = lines[-1].partition("  #")
    lines[-1] = body.rstrip(",") + "]" + (f"  #{note}" if note else "")
    return lines


def wrap(groups: list[list[str]], notes: dict[str, str]) -> list[str]:
    """Lines of `groups`' items, a group on a new line unless it fits whole, a noted item ending its line."""
    lines, line = [], ""
    for group in groups:
        note = notes.get(group[0].strip('"'))
        if line and (note or len(line) + len(", ".join(group)) + 2 > WIDTH):
            lines.append(line)
            line = ""
        for name in group:
            if line and len(line) + len(name) + 2 > WIDTH:
                lines.append(line)
                line = ""
            line = f"{line} {name}," if line else f"{INDENT}{name},"
        if note:
            lines.append(f"{line}  {note}")
            line = ""
    return lines + [line] if line else lines


NOTE = re.compile(r'^\s*(?:- )?"?(?P<dep>[^"#,]+?)"?,?\s+(?P<note>#.*)$')


def rewrite(text: str, code: dict[str, set[str]]) -> str:
    """`text` (a dvc.yaml) with every stage's `deps:` in canonical form, its code replaced by `code[stage]` where
    given."""
    stages = yaml.safe_load(text)["stages"]
    lines = text.splitlines()
    for name, stage in stages.items():
        start = next(i for i, line in enumerate(lines) if line == f"  {name}:")
        at = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("    deps:"))
        end = next((i for i in range(at + 1, len(lines)) if not lines[i].startswith(INDENT)), len(lines))
        notes = {m["dep"]: m["note"] for line in lines[at + 1:end] if (m := NOTE.match(line))}
        deps = stage["deps"]
        if name in code:
            deps = [d for d in deps if not is_code(d)] + sorted(code[name])
        lines[at:end] = deps_lines(deps, notes)
    return "\n".join(lines) + "\n"


def traced(trace: Path) -> dict[str, dict[str, set[str]]]:
    """Per stage (as DVC names it), the union over its processes of each kind of record `sitecustomize.py` wrote."""
    found: dict[str, dict[str, set[str]]] = {}
    for path in trace.glob("*/*.json"):
        record = json.loads(path.read_text())
        seen = found.setdefault(record["stage"], {kind: set() for kind in KINDS})
        for kind in KINDS:
            seen[kind].update(record[kind])
    return found


def runs_code(module: Path) -> bool:
    """Whether the module's body holds anything besides its docstring."""
    body = ast.parse(module.read_bytes()).body
    return len(body) > (1 if ast.get_docstring(ast.Module(body=body, type_ignores=[])) is not None else 0)


def imported(trace: Path, repo: Path) -> dict[str, set[str]]:
    """Per stage, the project modules its processes imported that run code, relative to `repo`."""
    return {name: {Path(m).relative_to(repo).as_posix() for m in seen["modules"] if runs_code(Path(m))}
            for name, seen in traced(trace).items()}


def main(trace: str, repo: str, project: Path = Path(".")) -> None:
    code_of = imported(Path(trace), Path(repo))
    for file, prefix in FILES.items():
        path = project / file
        code = {name.removeprefix(prefix): files for name, files in code_of.items()
                if name.startswith(prefix) and (prefix or ":" not in name)}
        path.write_text(rewrite(path.read_text(), code))


if __name__ == "__main__":
    main(*sys.argv[1:3])
