"""Params field types and the cache-key rule: which fields enter a key (`keyed_dump`) and which never do (`unkeyed`)."""

from __future__ import annotations

import string
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from tasks.core.edits import EDIT_TYPES

VAE_FACTOR = 8  # Stable Diffusion's VAE downsamples by 8: image sizes must be multiples of it
PENN_TAGS = frozenset("CC CD DT EX FW IN JJ JJR JJS LS MD NN NNS NNP NNPS PDT POS PRP PRP$ RB RBR RBS RP SYM TO UH VB "
                      "VBD VBG VBN VBP VBZ WDT WP WP$ WRB # $ '' ( ) , . : ``".split())  # as NLTK's pos_tag emits


def unkeyed(default: Any, description: str, **constraints: Any) -> Any:
    """A field that never changes what a cached unit computes (batch sizes, threads) or is applied after the cache:
    `keyed_dump` leaves it out of cache keys."""
    return Field(default, description=description, json_schema_extra={"keyed": False}, **constraints)


def template(**example: Any) -> Any:
    """A `str.format` template over the named fields of `example` only (no positional field, index or attribute),
    checked by formatting `example` once: a bad placeholder fails when params load, not mid-run."""

    def check(value: str) -> str:
        try:
            fields = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
            if unknown := [name for name in fields if name not in example]:
                raise ValueError(f"{{{unknown[0]}}} is not one of {', '.join(f'{{{name}}}' for name in example)}")
            value.format(**example)
        except (KeyError, IndexError, AttributeError, TypeError) as err:  # a placeholder inside a format spec
            raise ValueError(f"not a template over {', '.join(example)} ({type(err).__name__}: {err})") from None
        return value

    return Annotated[str, AfterValidator(check)]


WordPrompt = template(word="dog")  # a prompt about one word of an edit: C_o's or C_c's


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


EditType = Literal[tuple(EDIT_TYPES)]
PosTag = Annotated[str, AfterValidator(_penn_tag)]
Cosine = Annotated[float, Field(ge=-1.0, le=1.0)]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
Seed = Annotated[int, Field(ge=0, lt=2**32)]  # what every seeded generator takes (numpy's: unsigned 32-bit)
RepoId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")]  # the Hub's owner/name
