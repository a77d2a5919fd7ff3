"""The manifest: every DVC stage (`STAGES`, each one declaration, `STAGE` in `tasks/stages/<name>.py`) and every
params section (`Sections`, each a class beside its stage's logic in `tasks/<package>/params.py`). It imports neither:
a command imports the declaration of the stage it runs and the sections it reads, so an edit to another stage's
declaration or section is none of its code. A declaration imports no stage logic, no flow and no model library
(polars schemas only), so `cfgen --help`, the DAG and the release stages read every declaration and run no stage's
code, and a command loads only the logic of the stage it runs. Its CLI command, the whole-DAG flow's order and
`dvc.yaml`'s stages derive from it (`tests/core/test_stages.py` checks `dvc.yaml` against it).

A stage's name is its DVC stage and, with `-` for `_`, its CLI command; `reads` are the params sections it reads (its
command assembles those and the shared ones: an edit to another section's module is none of its code), `after` the
stages whose outputs it reads. There are two kinds:
- a data `Stage` (`cfgen NAME SOURCE OUTPUT`): a sharded caption step runs `module.run(frame, section,
  module.load_models(section))` per shard, the image stages map pairs; the first paragraph of `module`'s docstring is
  its help. `code` is what its cached unit executes (`"module:name"` entries; default: `run` and `load_models`; the
  image stages: a sample's render and measurement), which its cache keys hold; an entry naming nothing fails where
  it is declared. `input` is what it reads from the output of `after`; `data` is the `paths` entry it writes.
- a `TableStage` (`cfgen NAME`): `flow(params)` reads and writes whole tables at `paths`, after `check(params)` and the
  pre-flight of the models of `models` (sections); `sharded` runs it on the engine's task runner; `show(result)`
  prints its result. `after_steps` adds every data stage to its `after` (`stages`): it reads what each one writes
  (report: their metrics; gallery: their rejects too), so a new data stage needs no edit of it.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass, replace
from functools import cache
from graphlib import TopologicalSorter
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, cast

from tasks.core import params as core
from tasks.core.errors import UserError
from tasks.core.schemas import Schema
from tasks.core.source import check_entry, parse, source_file

if TYPE_CHECKING:  # the sections, as typed references `Sections` names; a command imports the ones it reads
    import tasks.demo.params
    import tasks.evaluation.params
    import tasks.image.params
    import tasks.judge.params
    import tasks.release.params
    import tasks.removal.params
    import tasks.text.params
    import tasks.toyworld.params
    import tasks.validation.params
    from tasks.core.params import Section

STAGES = ("params", "ingest", "sites", "saliency", "candidates", "relations", "similarity", "perplexity", "generate",
          "selection", "judge", "truth", "validation_tasks", "validation", "evaluate", "report", "export", "mixtures",
          "datasheet", "gallery", "removal_masks", "removal_captions", "inpaint", "removal_selection",
          "removal_export")
FIRST = "params"  # the stage every other one follows: the whole params file validated before any stage works
CAPTIONS, IMAGES = "ingest", "generate"  # the caption steps run between them (`caption_steps`)


class Sections:
    """Every params section but the shared ones (`tasks.core.params.SHARED`), in `params.yaml`'s order: its name and
    its class. Read, not instantiated: `section` imports a class when a command assembles it."""

    tiny_models: tasks.demo.params.TinyModelsParams
    sites: tasks.text.params.SitesParams
    saliency: tasks.text.params.SaliencyParams
    candidates: tasks.text.params.CandidatesParams
    relations: tasks.text.params.RelationsParams
    similarity: tasks.text.params.SimilarityParams
    perplexity: tasks.text.params.PerplexityParams
    generate: tasks.image.params.GenerateParams
    selection: tasks.image.params.SelectionParams
    judge: tasks.judge.params.JudgeParams
    truth: tasks.toyworld.params.TruthParams
    export: tasks.release.params.ExportParams
    validation: tasks.validation.params.ValidationParams
    evaluate: tasks.evaluation.params.EvaluateParams
    mixtures: tasks.release.params.MixturesParams
    datasheet: tasks.release.params.DatasheetParams
    gallery: tasks.release.params.GalleryParams
    synthetic_coco: tasks.demo.params.SyntheticCocoParams
    removal_masks: tasks.removal.params.RemovalMasksParams
    removal_captions: tasks.removal.params.RemovalCaptionsParams
    inpaint: tasks.removal.params.InpaintParams
    removal_selection: tasks.removal.params.RemovalSelectionParams


if TYPE_CHECKING:
    class Params(core.Params, Sections):
        """A command's params as a checker sees them: the shared sections and every section, typed (a command holds
        the ones its stage reads, `tasks.config.load_params`)."""
else:
    Params = core.Params


def section_names() -> tuple[str, ...]:
    """Every section's name (nothing imported)."""
    return tuple(Sections.__annotations__)


@cache
def section(name: str) -> type[Section]:
    """The class of section `name`, imported with its module (and no other section's)."""
    if name not in Sections.__annotations__:
        raise ValueError(f"no params section named {name} is declared in tasks.stages.Sections")
    module, _, attribute = Sections.__annotations__[name].rpartition(".")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Stage:
    name: str
    data: str
    output: Schema
    rejects: Schema
    module: str
    input: Schema | None = None
    after: str | None = None
    code: tuple[str, ...] = ()
    reads: tuple[str, ...] | None = None  # None: its own section

    def __post_init__(self) -> None:
        for entry in self.entries:
            check_entry(entry)

    @property
    def command(self) -> str:
        return self.name

    @property
    def needs(self) -> tuple[str, ...]:
        return (FIRST, self.after) if self.after else (FIRST,)

    @property
    def sections(self) -> tuple[str, ...]:
        return (self.name,) if self.reads is None else self.reads

    @property
    def entries(self) -> tuple[str, ...]:
        """`module:name` of the code the stage's cached unit executes."""
        return self.code or (f"{self.module}:run", f"{self.module}:load_models")

    @property
    def logic(self) -> ModuleType:
        """The stage's module, imported (its models' libraries with it)."""
        return importlib.import_module(self.module)

    @property
    def help(self) -> str:
        """The first paragraph of the logic module's docstring, read from its source (nothing imported)."""
        docstring = ast.get_docstring(parse(cast(Path, source_file(self.module))))  # a stage module has both
        return " ".join(cast(str, docstring).split("\n\n")[0].split())

    def section(self, params):
        """This stage's typed params section of a whole `Params`."""
        return getattr(params, self.name)


@dataclass(frozen=True)
class TableStage:
    name: str
    flow: str
    help: str
    after: tuple[str, ...] = ()
    reads: tuple[str, ...] | None = None  # None: every section
    models: tuple[str, ...] = ()
    check: str | None = None
    show: str | None = None
    sharded: bool = False
    after_steps: bool = False

    def __post_init__(self) -> None:
        for entry in (self.flow, self.check, self.show):
            if entry is not None:
                check_entry(entry)

    @property
    def command(self) -> str:
        return self.name.replace("_", "-")

    @property
    def needs(self) -> tuple[str, ...]:
        return self.after if self.name == FIRST else (FIRST, *self.after)

    @property
    def sections(self) -> tuple[str, ...] | None:
        return self.reads


def stage(name: str) -> Stage | TableStage:
    """The declaration of stage `name` (its DVC name or its command), importing its module and no other stage's."""
    if (key := name.replace("-", "_")) not in STAGES:
        raise UserError(f"no stage named {name}: a stage is declared in tasks/stages/<name>.py and listed in "
                        "tasks.stages.STAGES")
    return importlib.import_module(f"{__name__}.{key}").STAGE


def step(name: str) -> Stage:
    """The declaration of data stage `name` (`stage`); a table stage's name is an error."""
    if not isinstance(declared := stage(name), Stage):
        raise ValueError(f"stage {name} is a table stage, not a data stage")
    return declared


def table(name: str) -> TableStage:
    """The declaration of table stage `name` (`stage`); a data stage's name is an error."""
    if not isinstance(declared := stage(name), TableStage):
        raise ValueError(f"stage {name} is a data stage, not a table stage")
    return declared


@cache
def stages() -> dict[str, Stage | TableStage]:
    """Every stage, in DAG order (a topological walk over `after`), a table stage's `after_steps` resolved."""
    loaded = {name: stage(name) for name in sorted(STAGES)}
    data = {name for name, s in loaded.items() if isinstance(s, Stage)}
    loaded |= {name: replace(s, after=tuple(sorted(data | set(s.after))), after_steps=False)
               for name, s in loaded.items() if isinstance(s, TableStage) and s.after_steps}
    order = TopologicalSorter({name: list(s.needs) for name, s in loaded.items()}).static_order()
    return {name: loaded[name] for name in order}


def steps() -> dict[str, Stage]:
    """The data stages (ingest, the caption steps, generate, selection), in DAG order."""
    return {name: s for name, s in stages().items() if isinstance(s, Stage)}


def caption_steps() -> tuple[str, ...]:
    """The sharded caption steps, in DAG order: the data stages, ingest aside, that the image stage reads through."""
    read: set[str] = set()
    todo = [IMAGES]
    while todo:
        read |= (new := set(stages()[todo.pop()].needs) - read)
        todo += new
    return tuple(name for name in steps() if name in read and name != CAPTIONS)


def skip_reason(name: str, params) -> str | None:
    """Why stage `name` passes its input through unchanged, loading no model, or None when it runs: saliency needs
    to be enabled and to have real images."""
    if name != "saliency":
        return None
    if not params.saliency.enabled:
        return "saliency.enabled is false"
    return None if params.paths.source_images else "paths.source_images is not set: no real images to rank with"
