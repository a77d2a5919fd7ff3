"""Model specs: what names a model (hub id or local path + pinned revision) and how it runs, per model family."""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from pydantic.json_schema import JsonDict

from tasks.core.errors import UserError
from tasks.core.fields import Rooted, unkeyed
from tasks.core.licenses import LicenseKey

PACKAGE_SCHEME = "pkg:"


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


PLACEMENT: JsonDict = {"keyed": False}  # keyed as resolved where the model runs (`keys.placement`), never as written


class ModelSpec(Rooted):
    """A model's identity (hub id or local path + pinned revision), where/how it runs and the license it comes under.
    Keys and provenance use `id` as written; `local()` is where this process loads a path from."""

    id: str
    revision: str | None = None
    device: str = Field("auto", pattern=r"^(auto|cpu|mps|(cuda|xpu)(:\d+)?)$", json_schema_extra=PLACEMENT,
                        description="auto, cpu, mps, cuda or xpu (`cuda:1`: one device of several)")
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field("auto", json_schema_extra=PLACEMENT)
    license: LicenseKey | None = unkeyed(None, "the license the model comes under (a key of `licenses.LICENSES`; "
                                         "cfgen: the project's own); None: its model card's, else its image backend's")

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
