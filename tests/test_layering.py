"""Import layering of `tasks`, read from the source (imports inside functions count): each package imports only what
its docstring allows, a stage's params section (`tasks/<package>/params.py`) only the core, nothing in `tasks` imports
`flows` or Prefect (nor names a module of `flows` in a string, to import at run time), and neither release nor a
stage declaration (`tasks.stages`) touches a model library."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

from tasks.core import source
from tasks.stages import Sections
from tests.conftest import ROOT

ALLOWED = {  # package -> project packages/modules it may import
    "tasks.core": ("tasks.core",),
    "tasks.text": ("tasks.core", "tasks.text"),
    "tasks.image": ("tasks.core", "tasks.image"),
    "tasks.release": ("tasks.core", "tasks.stages", "tasks.release"),
    "tasks.stages": ("tasks.core", "tasks.stages"),
    "tasks.tiny": ("tasks.core", "tasks.tiny"),
    "tasks.demo": ("tasks.core", "tasks.text.ingest", "tasks.tiny", "tasks.demo", "tasks.toyworld.assemble"),
    "tasks.toyworld": ("tasks.core", "tasks.image.params", "tasks.image.sampling", "tasks.image.backends",
                       "tasks.image.render", "tasks.image.thresholds",  # truth renders and ranks as the image stage
                       "tasks.image.p2p",  # the trainer's grounding captures maps with P2P's q·k·v projections
                       "tasks.tiny", "tasks.toyworld"),
    "tasks.evaluation": ("tasks.core", "tasks.image.scoring", "tasks.evaluation"),
    "tasks.validation": ("tasks.core", "tasks.validation"),
    "tasks.removal": ("tasks.core", "tasks.text.ingest", "tasks.text.tagging", "tasks.image.scoring", "tasks.removal"),
    "tasks.plan": ("tasks.core", "tasks.stages", "tasks.image.params", "tasks.plan"),
    "tasks.judge": ("tasks.core", "tasks.validation.agreement", "tasks.judge"),
}
SECTIONS = tuple(f"{package}.params" for package in ALLOWED  # each stage's params
                 if package not in ("tasks.core", "tasks.stages"))
MANIFEST = {"tasks.stages": tuple(name.rpartition(".")[0] for name in Sections.__annotations__.values())}
"""Module -> what it alone may name too: the modules of `Sections`' typed references (under TYPE_CHECKING: a section
class beside its stage's logic is named, never imported, by the manifest)."""
ROOTS = {"tasks.config": ("tasks.core", "tasks.stages")}  # params: it assembles the sections the manifest names
MODEL_LIBRARIES = ("torch", "transformers", "diffusers", "open_clip", "sentence_transformers")
FORBIDDEN = {  # package -> modules it must never import, even where ALLOWED admits their package
    "tasks": ("flows", "prefect", "prefect_dask", "dask"),
    "tasks.release": ("tasks.core.loading", *MODEL_LIBRARIES),
    "tasks.stages": ("nltk", *MODEL_LIBRARIES),  # declarations: read by every command and the release stages
}


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(root: Path) -> list[str]:
    """`module imports name` for every import that breaks ALLOWED or FORBIDDEN under `root/tasks`."""
    found = []
    for path in sorted((root / "tasks").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        names = source.imported(module, path)
        project = {n for n in names if within(n, "tasks") and n != "tasks"}
        for package, allowed in (ALLOWED | ROOTS | dict.fromkeys(SECTIONS, ("tasks.core",))).items():
            if within(module, package):
                allowed = (*allowed, *MANIFEST.get(module, ()))
                found += [f"{module} imports {n}" for n in sorted(project)
                          if not any(within(n, a) or within(a, n) for a in allowed)]
        for package, banned in FORBIDDEN.items():
            if within(module, package):
                found += [f"{module} imports {n}" for n in sorted(names) if any(within(n, b) for b in banned)]
        found += [f"{module} names {n}" for n in named_flows(path)]
    return found


def named_flows(path: Path) -> list[str]:
    """The string constants in `path` that name a module of `flows` (`"flows.x"`, `"flows.x:name"`): an import that
    no tool follows, resolved at run time."""
    constants = (node.value for node in ast.walk(source.parse(path)) if isinstance(node, ast.Constant))
    return sorted(c for c in constants if isinstance(c, str) and re.fullmatch(r"flows(\.\w+)+(:\w+)?", c))


def test_every_tasks_package_imports_only_what_it_may():
    assert violations(ROOT) == []
    assert {p.parent.name for p in (ROOT / "tasks").glob("*/__init__.py")} == {a.split(".")[1] for a in ALLOWED}


def test_a_forbidden_import_is_reported(tmp_path):
    shutil.copytree(ROOT / "tasks", tmp_path / "tasks", ignore=shutil.ignore_patterns("__pycache__"))
    edits = {"text/tagging.py": "from tasks.image import render", "image/render.py": "from ..text import tagging",
             "release/report.py": "    from tasks.core.loading import load_pretrained",
             "release/diff.py": "import torch", "core/params.py": "from tasks.text import ingest",
             "tiny/text.py": "from tasks.text.tagging import tag_caption",
             "text/params.py": "from tasks.text import tagging", "stages/kinds.py": "from tasks.text import sites",
             "toyworld/world.py": "from tasks.demo.params import TinyModelsParams",
             "release/gallery.py": 'SHOW = "flows.release.gallery:show"'}
    for name, line in edits.items():
        path = tmp_path / "tasks" / name
        body = f"\n\ndef _late():\n{line}\n" if line.startswith(" ") else f"\n{line}\n"
        path.write_text(path.read_text() + body)
    for inner in ("image/generate.py",):  # and anything importing Prefect, at any depth
        path = tmp_path / "tasks" / inner
        path.write_text(path.read_text() + "\n\ndef _late():\n    from prefect import task\n")
    assert violations(tmp_path) == [
        "tasks.core.params imports tasks.text", "tasks.core.params imports tasks.text.ingest",
        "tasks.image.generate imports prefect", "tasks.image.generate imports prefect.task",
        "tasks.image.render imports tasks.text", "tasks.image.render imports tasks.text.tagging",
        "tasks.release.diff imports torch", "tasks.release.gallery names flows.release.gallery:show",
        "tasks.release.report imports tasks.core.loading",
        "tasks.release.report imports tasks.core.loading.load_pretrained",
        "tasks.stages.kinds imports tasks.text", "tasks.stages.kinds imports tasks.text.sites",
        "tasks.text.params imports tasks.text", "tasks.text.params imports tasks.text.tagging",
        "tasks.text.tagging imports tasks.image", "tasks.text.tagging imports tasks.image.render",
        "tasks.tiny.text imports tasks.text.tagging", "tasks.tiny.text imports tasks.text.tagging.tag_caption",
        "tasks.toyworld.world imports tasks.demo.params",
        "tasks.toyworld.world imports tasks.demo.params.TinyModelsParams",
    ]


def test_the_engine_imports_no_stage_flow_and_none_of_its_modules_imports_itself_back():
    """`flows/engine` (server, cluster, sharding, workspace, progress, ...) stands apart from the stage flows, and no
    two of its modules import each other, even inside functions (packages' `__init__` aside)."""
    engine = sorted(f"flows.engine.{p.stem}" for p in (ROOT / "flows/engine").glob("*.py") if p.stem != "__init__")
    assert {"flows.engine.server", "flows.engine.temporary_server", "flows.engine.cluster"} <= set(engine)
    for module in engine:
        reached = {m for m in source.closure(module) if m.startswith("flows.") and m != module
                   and source.source_file(m).name != "__init__.py"}
        assert reached <= set(engine), f"{module} imports the stage flows {sorted(reached - set(engine))}"
        assert not [m for m in reached if module in source.closure(m)], f"{module} is in an import cycle"
