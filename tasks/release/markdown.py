"""Markdown for the datasheet and the cards: tables, params listings, and text made public (no absolute path, no
secret)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_ABSOLUTE = re.compile(r"(?<![\w.~:/\\-])(?:~|[A-Za-z]:)?[/\\][^\s`'\"|]+")
_SECRET_KEY = re.compile(r"(?:token|secret|password|api_key)$", re.IGNORECASE)  # hub_token, not max_tokens


def public(text: str) -> str:
    """`text` with every absolute path (`/…`, `~/…`, `C:\\…`) cut to `…/<last component>`."""
    return _ABSOLUTE.sub(lambda m: "…/" + re.split(r"[/\\]", m.group(0).rstrip("/\\"))[-1], text)


def cell(value: Any) -> str:
    return str(value).replace("|", "\\|")


def score(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown_table(header: tuple[str, ...], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows])


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested params -> {"dotted.key": leaf}; an empty mapping is a leaf."""
    out = {}
    for key, value in params.items():
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def param_lines(params: Mapping[str, Any]) -> str:
    lines = []
    for key, value in flatten(params).items():
        shown = "<redacted>" if _SECRET_KEY.search(key) else value if isinstance(value, str) else json.dumps(value)
        lines.append(f"{key} = {shown}")
    return "```\n" + "\n".join(lines) + "\n```"
