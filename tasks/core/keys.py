"""The one key builder for every unit that persists a result (caption shard, sample record, canonical render,
evaluation, judge, inpaint).

A unit's key = its own input's content + `Unit.shared` + where it runs:
- `shared`, computed once per run on the submitting side and shipped with every task: the params the unit reads
  (`fields.keyed_dump`: no unkeyed field, no model placement), its models' contents (`fingerprints`), and the code it
  runs with the libraries and data that code reads (`code.identity`);
- the placement of the models it runs (device type and dtype after `auto`), resolved by the process that runs it:
  `device: cpu` and `auto` on a CPU host are one key, `cuda:0` and `auto` on a GPU host another.
A process whose own code identity for the unit differs from the shipped one (a Dask worker started before a
`git pull`) refuses to compute it (`Unit.check`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel

from tasks.core.code import entry, identity
from tasks.core.errors import UserError
from tasks.core.fields import keyed_dump
from tasks.core.fingerprints import fingerprint
from tasks.core.specs import ModelSpec


class StaleCode(UserError):
    """This process runs other code than the checkout that submitted the unit."""


def digest(*parts: str | bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


@cache
def running_code(entries: tuple[str, ...]) -> str:
    """The code identity of `entries` as this process runs them (once per process: imported code never changes)."""
    return identity(*entries).key


@cache
def placement(specs: tuple[ModelSpec, ...]) -> tuple[str, ...]:
    """`device type/dtype` of each model, resolved in this process."""
    from tasks.core.loading import resolve_device, resolve_dtype

    return tuple(f"{(device := resolve_device(spec)).type}/{resolve_dtype(spec, device)}" for spec in specs)


@dataclass(frozen=True)
class Unit:
    """What fixes a unit's output besides its own input; `placed`: the models whose placement it runs."""

    name: str
    entries: tuple[str, ...]
    code: str
    shared: str
    placed: tuple[ModelSpec, ...] = ()

    def digest(self, *content: str | bytes) -> str:
        """The key of the unit whose own input is `content`, run in this process."""
        return digest(self.shared, *placement(self.placed), *content)

    def key(self, *content: str | bytes) -> str:
        """`digest`, named by the unit (a Prefect cache key)."""
        return f"{self.name}-{self.digest(*content)}"

    def check(self) -> None:
        """Raise `StaleCode` (one line) when this process would run other code than the unit was keyed with."""
        if running_code(self.entries) != self.code:
            raise StaleCode(f"restart the workers: they run other code than this checkout ({self.name})")


def unit(name: str, code: Iterable[Callable | str], params: BaseModel | dict[str, Any],
         models: Iterable[ModelSpec] = (), placed: Iterable[ModelSpec] | None = None) -> Unit:
    """The unit `name` running `code` (function or class objects, or a declaration's checked `"module:name"` entries:
    a renamed one fails where it is named), reading `params` (a section, keyed fields only, or a dict already reduced
    to what it reads) and loading `models` (placed: `models`, unless given)."""
    entries, models = tuple(sorted({c if isinstance(c, str) else entry(c) for c in code})), tuple(models)
    code = identity(*entries).key
    read = keyed_dump(params) if isinstance(params, BaseModel) else params
    shared = digest(json.dumps(read, sort_keys=True), *(fingerprint(m) for m in models), code)
    return Unit(name, entries, code, shared, models if placed is None else tuple(placed))
