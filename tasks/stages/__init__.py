"""The stage registry: each data stage is one `Stage` declaration in its own module of this package, registered under
the `cfgen.stages` entry-point group (`pyproject.toml`). A declaration imports no stage logic and no model library
(polars schemas only), so the release stages and `cfgen --help` read every declaration and run no stage's code, and a
command loads only the logic of the stage it runs.

A stage's name is its CLI command, its DVC stage and its `params.yaml` section. Its logic is `module`: a sharded
caption step runs `module.run(frame, section, module.load_models(section))` per shard, and the first paragraph of
`module`'s docstring is the command's help. `code` is what its cached unit executes (`"module:name"` entries; default:
`run` and `load_models`; the image stages: a sample's render and measurement), which its cache keys hold; an entry
naming nothing fails where it is declared. `input` is what the stage reads from the output of `after`; `data` is the
`paths` entry it writes (a data name, which may differ from the stage's: perplexity writes `counterfactual_captions`).
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from functools import cache
from graphlib import TopologicalSorter
from importlib.metadata import entry_points
from types import ModuleType

from tasks.core.code import check_entry
from tasks.core.errors import UserError
from tasks.core.schemas import Schema
from tasks.core.source import parse, source_file

GROUP = "cfgen.stages"
CAPTION_STEPS = ("sites", "saliency", "candidates", "relations", "similarity", "perplexity")


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

    def __post_init__(self) -> None:
        for entry in self.entries:
            check_entry(entry)

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
        return " ".join(ast.get_docstring(parse(source_file(self.module))).split("\n\n")[0].split())

    def section(self, params):
        """This stage's typed params section of a whole `Params`."""
        return getattr(params, self.name)


def registered(group: str, name: str):
    """What `name` is registered as under entry-point `group`, importing its module (and no other entry's)."""
    found = entry_points(group=group, name=name)
    if not found:
        raise UserError(f"nothing named {name} is registered under {group}: reinstall the project (`make setup`) "
                        "after editing pyproject.toml's entry points")
    return next(iter(found)).load()


def stage(name: str) -> Stage:
    return registered(GROUP, name)


@cache
def stages() -> dict[str, Stage]:
    """Every registered stage, in DAG order."""
    loaded = {point.name: point.load() for point in entry_points(group=GROUP)}
    order = TopologicalSorter({name: [s.after] if s.after else [] for name, s in loaded.items()}).static_order()
    return {name: loaded[name] for name in order}


def skip_reason(name: str, params) -> str | None:
    """Why stage `name` passes its input through unchanged, loading no model, or None when it runs: saliency needs
    to be enabled and to have real images."""
    if name != "saliency":
        return None
    if not params.saliency.enabled:
        return "saliency.enabled is false"
    return None if params.paths.source_images else "paths.source_images is not set: no real images to rank with"
