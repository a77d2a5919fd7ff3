"""The options every `cfgen` command that reads params takes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ParamOption = Annotated[list[str] | None, typer.Option("--param", "-p", help="key=value override, e.g. "
                                                        "similarity.upper=0.9 (repeatable)")]
ParamsFile = Annotated[Path, typer.Option("--params-file", help="the params file to read")]
