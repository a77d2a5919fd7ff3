"""Params building blocks: the base models (`Frozen`, `Rooted`), field types, and the cache-key rule: which fields
enter a key (`keyed_dump`) and which never do (`unkeyed`)."""

from __future__ import annotations

import string
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeAlias

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

VAE_FACTOR = 8  # Stable Diffusion's VAE downsamples by 8: image sizes must be multiples of it
PENN_TAGS = frozenset("CC CD DT EX FW IN JJ JJR JJS LS MD NN NNS NNP NNPS PDT POS PRP PRP$ RB RBR RBS RP SYM TO UH VB "
                      "VBD VBG VBN VBP VBZ WDT WP WP$ WRB # $ '' ( ) , . : ``".split())  # as NLTK's pos_tag emits


def admits_bool(annotation: Any) -> bool:
    """Whether a field of this type may hold `True`/`False` (bool, Any, or a union or annotation with one)."""
    return _admits(annotation, bool) or _admits(annotation, Any)


def _admits(annotation: Any, kind: Any) -> bool:
    if annotation is kind:
        return True
    origin = typing.get_origin(annotation)
    return (origin in (typing.Union, types.UnionType, typing.Annotated)
            and any(_admits(arg, kind) for arg in typing.get_args(annotation)))


INT_LIMIT = 2**32  # no count, size or seed here comes near it; past it, libraries overflow or allocate without end


class Frozen(BaseModel):
    """Immutable, no unknown keys, no YAML `true`/`yes` read as the number 1, no integer of `INT_LIMIT` or more, no
    path given as '' (read as `.`, the folder a command runs in)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _plain_values(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name)
                if isinstance(value, bool) and field is not None and not admits_bool(field.annotation):
                    raise ValueError(f"{name} is {str(value).lower()} (a YAML boolean), expected "
                                     f"{_shown(field.annotation)}")
                if value == "" and field is not None and _admits(field.annotation, Path):
                    raise ValueError(f"{name} is empty; give a path")
        return data

    @field_validator("*")
    @classmethod
    def _within_int_limit(cls, value: Any) -> Any:
        if big := next((n for n in _ints(value) if abs(n) >= INT_LIMIT), None):
            raise ValueError(f"{big} is beyond ±2**32: more than any count, size or seed can be")
        return value


def _ints(value: Any) -> Iterator[int]:
    """Every int in `value`, in its lists, tuples, sets and mappings (keys and values) at any depth: a list of counts
    is bounded like one count."""
    if type(value) is int:
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _ints(key)
            yield from _ints(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _ints(item)


def _shown(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


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


def unkeyed(default: Any, description: str, **constraints: Any) -> Any:
    """A field that never changes what a cached unit computes (batch sizes, threads) or is applied after the cache:
    `keyed_dump` leaves it out of cache keys."""
    return Field(default, description=description, json_schema_extra={"keyed": False}, **constraints)


def template_check(**example: Any) -> AfterValidator:
    """A `str.format` template over the named fields of `example` only (no positional field, index or attribute),
    checked by formatting `example` once: a bad placeholder fails when params load, not mid-run. Its field type:
    `Name: TypeAlias = Annotated[str, template_check(...)]`."""

    def check(value: str) -> str:
        try:
            fields = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
            if unknown := [name for name in fields if name not in example]:
                raise ValueError(f"{{{unknown[0]}}} is not one of {', '.join(f'{{{name}}}' for name in example)}")
            value.format(**example)
        except (KeyError, IndexError, AttributeError, TypeError) as err:  # a placeholder inside a format spec
            raise ValueError(f"not a template over {', '.join(example)} ({type(err).__name__}: {err})") from None
        return value

    return AfterValidator(check)


WordPrompt: TypeAlias = Annotated[str, template_check(word="dog")]  # a prompt about one word of an edit: C_o's or C_c's


def keyed_dump(model: BaseModel) -> dict[str, Any]:
    """`model.model_dump(mode="json")` without its unkeyed fields, at every depth (models inside mappings and lists
    too): what enters a cache key."""
    dump = model.model_dump(mode="json")
    return {name: _keyed(getattr(model, name), dump[name]) for name, field in type(model).model_fields.items()
            if not (isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("keyed") is False)}


def _keyed(value: Any, dumped: Any) -> Any:
    if isinstance(value, BaseModel):
        return keyed_dump(value)
    if isinstance(value, dict):
        return {k: _keyed(v, dumped[k]) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_keyed(v, d) for v, d in zip(value, dumped)]
    return dumped


def _penn_tag(tag: str) -> str:
    if tag not in PENN_TAGS:
        raise ValueError(f"{tag!r} is not a Penn Treebank POS tag")
    return tag


def ordered(pair: tuple[float, float]) -> tuple[float, float]:
    if not pair[0] <= pair[1]:
        raise ValueError(f"needs lo <= hi, got {pair}")
    return pair


PosTag = Annotated[str, AfterValidator(_penn_tag)]
Cosine = Annotated[float, Field(ge=-1.0, le=1.0)]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
Seed = Annotated[int, Field(ge=0, lt=2**32)]  # what every seeded generator takes (numpy's: unsigned 32-bit)
RepoId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")]  # the Hub's owner/name
