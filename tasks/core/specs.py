"""Model specs: what names a model (hub id or local path + pinned revision) and how it runs, per model family."""

from __future__ import annotations

import importlib.resources
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from tasks.core.errors import UserError

PACKAGE_SCHEME = "pkg:"


def admits_bool(annotation: Any) -> bool:
    """Whether a field of this type may hold `True`/`False` (bool, Any, or a union or annotation with one)."""
    if annotation is bool or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    return (origin in (typing.Union, types.UnionType, typing.Annotated)
            and any(admits_bool(arg) for arg in typing.get_args(annotation)))


INT_LIMIT = 2**32  # no count, size or seed here comes near it; past it, libraries overflow or allocate without end


class Frozen(BaseModel):
    """Immutable, no unknown keys, no YAML `true`/`yes` read as the number 1, no integer of `INT_LIMIT` or more."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _plain_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name)
                if isinstance(value, bool) and field is not None and not admits_bool(field.annotation):
                    raise ValueError(f"{name} is {str(value).lower()} (a YAML boolean), expected "
                                     f"{_shown(field.annotation)}")
        return data

    @field_validator("*")
    @classmethod
    def _within_int_limit(cls, value: Any) -> Any:
        if type(value) is int and abs(value) >= INT_LIMIT:
            raise ValueError(f"{value} is beyond ±2**32: more than any count, size or seed can be")
        return value


def _shown(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def resolve_path(value: str, root: Path | None = None) -> str:
    """Where a model path is loaded from: `pkg:module/sub/dir` -> that folder inside an installed package; a relative
    path that exists under `root` -> absolute; anything else (a hub id, an absolute path) as is."""
    if value.startswith(PACKAGE_SCHEME):
        package, _, sub = value.removeprefix(PACKAGE_SCHEME).partition("/")
        try:
            return str(importlib.resources.files(package).joinpath(sub))
        except (ImportError, TypeError, ValueError) as err:  # no such module; an empty or relative module name
            raise UserError(f"{value}: no installed package {package!r} ({type(err).__name__})") from None
    if root is not None and not Path(value).is_absolute() and (root / value).exists():
        return str(root / value)
    return value


class Rooted(Frozen):
    """Remembers the folder its relative paths point into: the working directory params were loaded in (given as
    validation context `root` by `load_params`; the project, where DVC runs every stage), against which data paths
    resolve too. It travels with the object (pickled to a Dask worker on another host, in another directory) and is
    in no dump, so in no cache key: a key never depends on where the project lives. Unset: the working directory."""

    _root: Path | None = PrivateAttr(None)

    def model_post_init(self, context: Any) -> None:
        if isinstance(context, dict) and context.get("root") is not None:
            self._root = Path(context["root"])

    @property
    def root(self) -> Path:
        return self._root or Path.cwd()


PLACEMENT = {"keyed": False}  # keyed as resolved where the model runs (`keys.placement`), never as written


class ModelSpec(Rooted):
    """A model's identity (hub id or local path + pinned revision) and where/how it runs. Keys and provenance use
    `id` as written; `local()` is where this process loads a path from."""

    id: str
    revision: str | None = None
    device: str = Field("auto", pattern=r"^(auto|cpu|mps|(cuda|xpu)(:\d+)?)$", json_schema_extra=PLACEMENT,
                        description="auto, cpu, mps, cuda or xpu (`cuda:1`: one device of several)")
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field("auto", json_schema_extra=PLACEMENT)

    def local(self, value: str | None = None) -> str:
        """`value` (default: `id`; or this spec's `pretrained` / `config`) as this process loads it (`resolve_path`
        under `root`)."""
        return resolve_path(self.id if value is None else value, self._root)


class ClipSpec(ModelSpec):
    """An open_clip model: `id` is the architecture, `pretrained` a tag (`openai`) or a checkpoint path; `config` is
    an architecture JSON to register first (its file stem must equal `id`), for architectures open_clip lacks.
    `revision` is unused: a tag names fixed weights."""

    id: str = "ViT-L-14"
    pretrained: str = "openai"
    config: str | None = None


class ItmSpec(ModelSpec):
    """A Hugging Face image-text model, loaded as transformers class `model_class` with its `AutoProcessor`. Without
    `index` it is a bi-encoder (`get_text_features` / `get_image_features`; score = cosine x logit scale); with it a
    cross-encoder scored by column `index` of its output `logits` (ViLT: logits, 0; FLAVA: itm_logits, 1)."""

    model_class: str
    logits: str = "logits"
    index: int | None = None


def model_specs(model: BaseModel, prefix: str = "") -> Iterator[tuple[str, ModelSpec]]:
    """(dotted key, spec) of every model spec in `model`, at any depth, mapping values included, in field order."""
    for name, value in model:
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for entry, item in items:
            key = f"{prefix}{name}" + (f".{entry}" if entry is not None else "")
            if isinstance(item, ModelSpec):
                yield key, item
            elif isinstance(item, BaseModel):
                yield from model_specs(item, f"{key}.")
