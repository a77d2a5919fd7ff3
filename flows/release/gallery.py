"""`cfgen gallery`: the static pair gallery, built by one run at a time (its logic: `tasks.release.gallery`)."""

from __future__ import annotations

from flows.engine.console import console
from tasks.core.io import check_input
from tasks.core.schemas import SELECTED
from tasks.stages import Params


def check(params: Params) -> None:
    check_input(params.paths.selected, SELECTED, "selection")


def gallery(params: Params) -> dict:
    """The site written under `paths.gallery` (locked: the site is written by one run at a time); its index and the
    count of each kind of card."""
    from tasks.core.publication import held
    from tasks.release.gallery import build

    with held(params.paths.gallery):
        return {"index": f"{params.paths.gallery}/index.html", "counts": build(params)}


def show(site: dict) -> None:
    console.print(f"gallery written to {site['index']}: " + ", ".join(f"{v} {k}" for k, v in site["counts"].items()))
