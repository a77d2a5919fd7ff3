"""`cfgen params`: the whole params file is valid (its command validated every section, `tasks.config.load_params`)
and every DVC stage that runs the chosen image backend depends on all of its code; the stamp it writes is the same
bytes whatever the params, so a stage that depends on it reruns for its own params only."""

from __future__ import annotations

from pathlib import Path

import yaml

from flows.engine.console import console
from tasks.core.errors import UserError
from tasks.core.source import ROOT
from tasks.core.writing import write_text
from tasks.stages import Params

STAMP = "every section of the params file is valid\n"
BACKEND_DEP = "tasks/image/backends/${generate.backend}.py"  # a stage that runs the chosen backend lists this dep


def check_params(params: Params) -> str:
    """Check the backend's code deps, then write the stamp at `paths.params_checked`; returns its path."""
    check_backend_deps(params, ROOT / "dvc.yaml")
    write_text(params.paths.params_checked, STAMP)
    return str(params.paths.params_checked)


def check_backend_deps(params: Params, dvc_file: Path) -> None:
    """One line unless every stage of `dvc_file` (the pipeline beside this code, whose deps name its files) that runs
    the chosen backend (its deps name `BACKEND_DEP`, which DVC resolves to the backend's module) also lists the rest
    of the backend's code (`backends.code_files`), so that DVC reruns it when any of it changes; nothing to check
    without one."""
    if not dvc_file.is_file():
        return
    from tasks.image.backends import code_files

    backend = params.generate.backend
    needed = {f.relative_to(ROOT).as_posix() for f in code_files(params.generate)} - {
        BACKEND_DEP.replace("${generate.backend}", backend)}
    try:
        stages = yaml.safe_load(dvc_file.read_text())["stages"]
    except (yaml.YAMLError, TypeError, KeyError) as err:
        raise UserError(f"{dvc_file.name} is no DVC pipeline file ({type(err).__name__}): `dvc repro` cannot read "
                        "it either") from None
    for name, stage in stages.items():
        deps = stage.get("deps") or []
        if BACKEND_DEP in deps and (missing := sorted(needed - set(deps))):
            raise UserError(f"{dvc_file.name}: stage {name} runs image backend {backend}, whose code includes "
                            f"{', '.join(missing)}, which its deps lack: add them, so that an edit to them reruns it")


def show(stamp: str) -> None:
    console.print(f"params valid: {stamp}")
