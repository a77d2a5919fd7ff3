"""`params.yaml` resolved and validated, before any work, into one frozen `Params` (`load_params`): the shared sections
and those a command reads (every one unless it names them); the file's other sections are validated all the same.

A value that differs between profiles is written as a mapping keyed by profile name (`{demo: ..., paper: ...}`); the
top-level `profile` picks its branch. Overrides (`key=value`, the value parsed as a YAML scalar) apply first:
- `profile=paper` switches the profile (branches are picked after every override);
- `generate.steps=5` sets the value for every profile (a `{demo: ..., paper: ...}` value is replaced by the scalar);
- `generate.diffusion.id=X` descends through a profile mapping without naming a profile: it edits every branch;
- `generate.diffusion.paper.id=X` names the profile: it edits that branch only.
An override may only set keys the schema knows; an unknown key, in the file or an override, is an error that names
the nearest valid key. Every error is a `ParamsError` of one line naming the dotted key.
"""

from __future__ import annotations

import difflib
import json
import os
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError, create_model
from pydantic_core import ErrorDetails

from tasks.core.errors import UserError
from tasks.core.params import PROFILES, SHARED
from tasks.core.source import CACHE, COMPILE_CACHE, ROOT
from tasks.stages import Params, Paths, section, section_names

PARAMS_FILE = Path("params.yaml")
PROJECT_CACHES = {"TORCHINDUCTOR_CACHE_DIR": COMPILE_CACHE,
                  "MPLCONFIGDIR": CACHE / "matplotlib"}  # matplotlib's font list, built on first import
PATH_VARIABLES = ("PREFECT_HOME", "PREFECT_RESULTS_LOCAL_STORAGE_PATH", "NLTK_DATA", "HF_HOME", "HF_HUB_CACHE",
                  "XDG_CACHE_HOME", *PROJECT_CACHES)  # the folders the project and its libraries read from variables
CHECKED_BY_DVC = "DVC_STAGE"  # set by DVC in a stage's command; the `params` stage ran before every stage


class ParamsError(UserError):
    """An invalid params file or override; the message is always one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class _Loader(yaml.SafeLoader):
    """Safe YAML without aliases (nested ones expand exponentially: an alias bomb) and without a key given twice in
    one mapping (the last would silently win)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"alias *{event.anchor}: aliases are refused, write the "
                                                          f"value out", event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        mapping = super().construct_mapping(node, deep)
        if len(mapping) < len(node.value):
            keys = [self.construct_object(key, deep) for key, _ in node.value]
            twice = next(key for i, key in enumerate(keys) if key in keys[:i])
            raise yaml.constructor.ConstructorError(None, None, f"key {twice!r} is given twice", node.start_mark)
        return mapping


def _yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)


def load_params(path: Path = PARAMS_FILE, overrides: Sequence[str] = (), sections: Iterable[str] | None = None
                ) -> Params:
    """The params file at `path` with `overrides` (`key=value`) applied, resolved for its profile and validated: the
    shared sections and `sections` (None: every registered one), in the file's order. Every other section is
    validated too, so a typo anywhere stops a command before any work; a command DVC runs skips that (`CHECKED_BY_DVC`:
    the `params` stage, which every stage depends on, validated the whole file first), so a stage's code deps hold
    only the sections it reads."""
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"params file {path} {'is not a regular file' if path.exists() else 'not found'}")
    try:
        raw = _yaml(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError:
        raise ParamsError(f"params file {path} is not UTF-8 text") from None
    except yaml.YAMLError as e:
        raise ParamsError(f"params file {path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ParamsError(f"params file {path} is not a mapping")
    for pair in overrides:
        key, sep, value = pair.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ParamsError(f"override {pair!r} is not key=value")
        try:
            parsed = _yaml(value)
        except yaml.YAMLError as e:
            raise ParamsError(f"override {pair!r}: the value is not valid YAML ({getattr(e, 'problem', None) or e})"
                              ) from None
        raw = _set(raw, parts, parsed, [])
    profile = raw.get("profile")
    if profile not in PROFILES:
        raise ParamsError(f"profile: must be one of {', '.join(PROFILES)}, got {profile!r}")
    known = (*SHARED, *section_names())
    if unknown := [key for key in raw if key not in known]:
        raise ParamsError(_unknown((unknown[0],), known))
    picked = _pick(raw, profile, [])
    if sections is not None and not os.environ.get(CHECKED_BY_DVC):
        _validated(section_names(), raw, picked)  # every section, as the `params` stage does under DVC
    return _validated(section_names() if sections is None else sections, raw, picked)


def _validated(sections: Iterable[str], raw: dict, picked: dict) -> Params:
    """The shared sections and `sections` of the profile-resolved params `picked` (of the file's mapping `raw`),
    validated, in the file's order."""
    wanted = set(sections)
    model = assemble([*(key for key in raw if key in wanted), *sorted(wanted - set(raw))])
    try:
        return model.model_validate({key: value for key, value in picked.items() if key in model.model_fields},
                                    context={"root": Path.cwd()})
    except ValidationError as e:
        errors = sorted(e.errors(), key=lambda err: err["type"] != "extra_forbidden")
        raise ParamsError("; ".join(_describe(err, model) for err in errors)) from None


class Assembled(Params):
    """`Params` with some sections (`assemble`): pickled as their names and its state, and rebuilt, not looked up,
    in another process."""

    def __reduce__(self) -> tuple:
        return _restore, (self.sections, self.__getstate__())


def _restore(names: tuple[str, ...], state: dict) -> Params:
    model = assemble(names)
    params = model.__new__(model)
    params.__setstate__(state)
    return params


@cache
def _assembled(names: tuple[str, ...]) -> type[Params]:
    return create_model("Params", __base__=Assembled, __module__=__name__,  # type: ignore[call-overload]  # mypy:
                        paths=(Paths, ...),  # with a field for each data stage's output `PathsParams` lacks
                        **{name: (section(name), ...) for name in names})  # the **dict might fill __config__ etc.


def assemble(names: Iterable[str] | None = None) -> type[Params]:
    """`Params` with the sections `names` (None: every one), in that order."""
    names = tuple(dict.fromkeys(section_names() if names is None else names))
    if unknown := sorted(set(names) - set(section_names())):
        raise ValueError(f"{', '.join(unknown)}: no such params section (declared: {', '.join(section_names())})")
    return _assembled(names)


def literal_overrides(values: Mapping[str, str | None]) -> list[str]:
    """`key=value` overrides whose values stay the strings given (JSON-quoted: YAML reads a path `#x.tsv`, `a: b` or
    `yes` back as that string); a None value is left out."""
    return [f"{key}={json.dumps(value)}" for key, value in values.items() if value is not None]


def _is_branches(node: Any) -> bool:
    return isinstance(node, dict) and bool(node) and set(node) <= set(PROFILES)


def _set(node: Any, parts: list[str], value: Any, at: list[str]) -> Any:
    """`node` with `value` at `parts`; a profile mapping not named by the next part gets it in every branch."""
    if _is_branches(node) and parts[0] not in PROFILES:
        return {branch: _set(sub, parts, value, [*at, branch]) for branch, sub in node.items()}
    if node is None:
        node = {}
    if not isinstance(node, dict):
        raise ParamsError(f"{'.'.join(at)}: is {node!r}, not a mapping; cannot set {'.'.join(parts)}")
    head, *rest = parts
    node[head] = _set(node.get(head), rest, value, [*at, head]) if rest else value
    return node


def _pick(node: Any, profile: str, at: list[str]) -> Any:
    if _is_branches(node):
        if profile not in node:
            raise ParamsError(f"{'.'.join(at)}: no value for profile {profile!r}")
        return _pick(node[profile], profile, at)
    if isinstance(node, dict):
        return {k: _pick(v, profile, [*at, str(k)]) for k, v in node.items()}
    return node


def _dotted(loc: Sequence[int | str]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


def _describe(err: ErrorDetails, model: type[Params]) -> str:
    loc = err["loc"]
    if err["type"] == "extra_forbidden":
        return _unknown(loc, _keys_at(model, loc[:-1]))
    msg = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]
    return f"{_dotted(loc)}: {msg}" if loc else msg


def _unknown(loc: Sequence[int | str], keys: Sequence[str]) -> str:
    """An unknown key at `loc`, with the nearest of `keys` (those beside it) when one is near."""
    parent = _dotted(loc[:-1])
    near = difflib.get_close_matches(str(loc[-1]), keys, n=1)
    hint = f" (did you mean '{parent + '.' if parent else ''}{near[0]}'?)" if near else ""
    return f"unknown key '{_dotted(loc)}'{hint}"


def _keys_at(model: Any, loc: Sequence[int | str]) -> list[str]:
    """The field names of the model at `loc` in `model` (none when `loc` leaves the models)."""
    for part in loc:
        field = model.model_fields.get(part)
        types = (field.annotation, *get_args(field.annotation)) if field else ()
        model = next((t for t in types if isinstance(t, type) and issubclass(t, BaseModel)), None)
        if model is None:
            return []
    return list(model.model_fields)


def use_project_environment() -> None:
    """What the Makefile exports, for a `cfgen` run outside `make` (or a worker): offline Hugging Face libraries
    (models are fetched by the commands `cfgen plan` prints, never at run time) unless the variables say otherwise;
    without `NLTK_DATA`, `../shared/nltk_data` beside the project when present, else the project's `.nltk_data`;
    the libraries' own caches in the project (`PROJECT_CACHES`: else torch's compiler makes
    `$TMPDIR/torchinductor_<user>` as it is imported, and matplotlib writes `~/.cache/matplotlib`) unless their
    variables say otherwise. A path variable set empty (`PATH_VARIABLES`) counts as unset: Prefect read
    `PREFECT_HOME=` as the current folder and put its database there.
    Called before any Hugging Face library or Prefect is imported (they read their variables once); in a DVC
    experiment's copy, the result store is the workspace's (`share_result_store`)."""
    for name in PATH_VARIABLES:
        if os.environ.get(name) == "":  # as if unset (the XDG rule), not the folder the command runs in
            del os.environ[name]
    share_result_store(Path.cwd())
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(name, "1")
    for name, folder in PROJECT_CACHES.items():
        os.environ.setdefault(name, str(folder))
    if os.environ.get("NLTK_DATA"):
        return
    shared = ROOT.parent / "shared" / "nltk_data"
    os.environ["NLTK_DATA"] = str(shared if shared.is_dir() else ROOT / ".nltk_data")
    if "nltk" in sys.modules:  # it read NLTK_DATA as it was imported
        sys.modules["nltk"].data.path.insert(0, os.environ["NLTK_DATA"])


EXPERIMENTS = (".dvc", "tmp", "exps")


def experiment_workspace(path: Path) -> Path | None:
    """The workspace whose temporary experiment copy holds `path`, or None."""
    parts = path.parts
    starts = [i for i in range(len(parts) - len(EXPERIMENTS)) if parts[i:i + len(EXPERIMENTS)] == EXPERIMENTS]
    return Path(*parts[:starts[-1]]) if starts else None


def share_result_store(cwd: Path) -> None:
    """Point a relative Prefect result store at the workspace's when `cwd` is a DVC experiment's temporary copy
    (`flows.engine.workspace`), before Prefect reads its settings."""
    workspace = experiment_workspace(cwd)
    if workspace is None:
        return
    store = os.environ.get("PREFECT_RESULTS_LOCAL_STORAGE_PATH")
    if store is None:
        config = cwd / "prefect.toml"
        home = os.environ.get("PREFECT_HOME") or (tomllib.loads(config.read_text()).get("home") if config.is_file()
                                                  else None)
        store = os.path.join(home, "storage") if home else None
    if store and not Path(store).expanduser().is_absolute():
        os.environ["PREFECT_RESULTS_LOCAL_STORAGE_PATH"] = str(workspace / store)
