"""What besides the project's own code runs a cached unit: the installed distributions and the data files it reads.

`library_versions` follows a library's requirements transitively (torchvision, reached only through open_clip's
preprocessing, counts like open_clip itself); `data_hashes` hashes NLTK data by content wherever `NLTK_DATA` finds it.
Both are read now, from this process's `sys.path` and environment.
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


def data_hashes(resources: set[str]) -> dict[str, str]:
    """NLTK resource (`taggers/averaged_perceptron_tagger_eng`) -> a hash of its files, as NLTK finds them now."""
    if not resources:
        return {}
    import nltk

    found = {}
    for name in sorted(resources):
        try:
            found[name] = content_hash(Path(nltk.data.find(name).path))
        except LookupError:
            raise UserError(f"NLTK data {name} not found (NLTK_DATA={os.environ.get('NLTK_DATA', 'unset')}): run "
                            f"`python -m nltk.downloader {name.split('/')[1]}`") from None
    return found
