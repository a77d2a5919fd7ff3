"""The two kinds of stage declaration the manifest (`tasks.stages`) is made of. A data stage names its logic
(`"module:name"` entries, each checked against the module's source as it is made: nothing imported), a table stage
none (its flow, check and show are `flows.hooks`'), so reading every declaration imports no stage's code.

- a data `Stage` (`cfgen NAME SOURCE OUTPUT`): a sharded caption step runs `module.run(frame, section,
  module.load_models(section))` per shard, the image stages map pairs; the first paragraph of `module`'s docstring is
  its help. `code` is what its cached unit executes (default: `run` and `load_models`; the image stages: a sample's
  render and measurement), `behaviours` the edit types' functions it runs besides (`tasks.core.edits.behaviours`);
  its cache keys hold both. `input` is what it reads from the output of `after`; `data` is the `paths` entry it writes.
- a `TableStage` (`cfgen NAME`): its flow (`flows.hooks`) reads and writes whole tables at `paths`, after its check
  and the pre-flight of the models of `models` (sections); `sharded` runs it on the engine's task runner.
  `after_steps` adds every data stage to its `after`: it reads what each one writes (report: their metrics; gallery:
  their rejects too), so a new data stage needs no edit of it.

`reads` are the params sections a stage's command assembles (besides the shared ones).
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import cast

from tasks.core.schemas import Schema
from tasks.core.source import check_entry, parse, source_file

FIRST = "params"  # the stage every other one follows: the whole params file validated before any stage works


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
    behaviours: tuple[str, ...] = ()
    reads: tuple[str, ...] | None = None  # None: its own section

    def __post_init__(self) -> None:
        for entry in self._own_code:
            check_entry(entry)

    @property
    def _own_code(self) -> tuple[str, ...]:
        return self.code or (f"{self.module}:run", f"{self.module}:load_models")

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
        """`module:name` of the code the stage's cached unit executes: its `code`, then its edit behaviours."""
        if not self.behaviours:
            return self._own_code
        from tasks.core.edits import behaviours  # only the stages that run an edit type's code import the types

        return (*self._own_code, *(entry for function in self.behaviours for entry in behaviours(function)))

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
    help: str
    after: tuple[str, ...] = ()
    reads: tuple[str, ...] | None = None  # None: every section
    models: tuple[str, ...] = ()
    sharded: bool = False
    after_steps: bool = False

    @property
    def command(self) -> str:
        return self.name.replace("_", "-")

    @property
    def needs(self) -> tuple[str, ...]:
        return self.after if self.name == FIRST else (FIRST, *self.after)

    @property
    def sections(self) -> tuple[str, ...] | None:
        return self.reads
