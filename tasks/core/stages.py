"""The stage registry: each data stage is one `Stage`, declared beside its logic and registered under the
`cfgen.stages` entry-point group (`pyproject.toml`), so a command loads only the stage it runs.

A stage's name is its CLI command, its DVC stage and its `params.yaml` section. A sharded caption step runs
`run(frame, section, load_models(section))` per shard; `code` is what its cached unit executes (default: `run` and
`load_models`; the image stages: a sample's render and measurement), which its cache keys hold. `input` is what the
stage reads from the output of `after`; `data` is the `paths` entry it writes (a data name, which may differ from the
stage's: perplexity writes `counterfactual_captions`). Importing this module imports no stage and no model library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from graphlib import TopologicalSorter
from importlib.metadata import entry_points

from tasks.core.errors import UserError
from tasks.core.schemas import Schema

GROUP = "cfgen.stages"
CAPTION_STEPS = ("sites", "saliency", "candidates", "relations", "similarity", "perplexity")


def entry(code: Callable) -> str:
    """`module:qualname` of a function or class, as `tasks.core.code.identity` reads it."""
    return f"{code.__module__}:{code.__qualname__}"


@dataclass(frozen=True)
class Stage:
    name: str
    description: str
    data: str
    output: Schema
    rejects: Schema
    input: Schema | None = None
    after: str | None = None
    run: Callable | None = None
    load_models: Callable | None = None
    code: tuple[Callable, ...] = ()

    @property
    def runs(self) -> tuple[Callable, ...]:
        """The code the stage's cached unit executes."""
        return self.code or (self.run, self.load_models)

    @property
    def entries(self) -> tuple[str, ...]:
        """`module:name` of `runs`."""
        return tuple(map(entry, self.runs))

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
