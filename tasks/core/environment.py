"""What besides the project's own code runs a cached unit: the installed distributions and the data files it reads.

`library_versions` follows a library's requirements transitively (torchvision, reached only through open_clip's
preprocessing, counts like open_clip itself); `data_hashes` hashes NLTK data by content wherever `NLTK_DATA` finds it.
Both are read now, from this process's `sys.path` and environment.

`data_hashes` remembers the absolute folder each resource was found in (`nltk_found`): a Dask worker, started
elsewhere without `NLTK_DATA`, is given those folders before its first task (`find_nltk_data`).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tasks.core.errors import UserError
from tasks.core.fingerprints import content_hash


@cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _requirements(distribution: importlib.metadata.Distribution) -> list[str]:
    """The distributions it requires when installed without extras (environment markers evaluated here)."""
    found = []
    for line in distribution.requires or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            found.append(requirement.name)
    return found


def library_versions(top_level: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Distribution name (lower case) -> installed version: (the distributions providing the non-stdlib top-level
    modules `top_level` and everything they require, transitively; those providing `top_level` themselves)."""
    direct = [d for name in sorted(top_level - set(sys.stdlib_module_names)) for d in _distributions().get(name, [])]
    roots, todo = {canonicalize_name(d) for d in direct}, list(direct)
    found, imported, seen = {}, {}, set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:  # an optional requirement that is not installed
            continue
        found[distribution.metadata["Name"].lower()] = distribution.version
        if name in roots:
            imported[distribution.metadata["Name"].lower()] = distribution.version
        todo.extend(_requirements(distribution))
    return dict(sorted(found.items())), dict(sorted(imported.items()))


_FOUND: dict[str, str] = {}  # NLTK resource -> the absolute folder of NLTK's search path it was found in


def nltk_found() -> dict[str, str]:
    """NLTK resource -> the absolute folder it was found in, for each resource `data_hashes` found so far."""
    return dict(_FOUND)


def data_hashes(resources: set[str]) -> dict[str, str]:
    """NLTK resource (`taggers/averaged_perceptron_tagger_eng`) -> a hash of its files, as NLTK finds them now."""
    if not resources:
        return {}
    import nltk

    found = {}
    for name in sorted(resources):
        try:
            path = Path(nltk.data.find(name).path).resolve()
        except LookupError:
            raise UserError(f"NLTK data {name} not found (NLTK_DATA={os.environ.get('NLTK_DATA', 'unset')}): run "
                            f"`python -m nltk.downloader {name.split('/')[1]}`") from None
        found[name] = content_hash(path)
        _FOUND[name] = next(str(root) for folder in nltk.data.path
                            if path.is_relative_to(root := Path(folder).resolve()))
    return found


def find_nltk_data(found: dict[str, str]) -> str | None:
    """Make each resource of `found` (`nltk_found` of the submitting process) findable in this process, adding its
    folder to NLTK's search path when that folder exists here; what is still missing, in one line (None: nothing)."""
    import nltk

    def findable(name: str) -> bool:
        try:
            return bool(nltk.data.find(name))
        except LookupError:
            return False

    for name, folder in sorted(found.items()):
        if not findable(name) and Path(folder).is_dir() and folder not in nltk.data.path:
            nltk.data.path.append(folder)
    if missing := [name for name in sorted(found) if not findable(name)]:
        return (f"finds no NLTK data {', '.join(missing)} (NLTK_DATA={os.environ.get('NLTK_DATA', 'unset')} there, "
                f"and {', '.join(sorted({found[n] for n in missing}))} is not on its host): restart it with NLTK_DATA "
                "set to a folder that holds them")
    return None
