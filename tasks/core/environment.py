"""What besides the project's own code runs a cached unit: the installed distributions and the data files it reads.

`library_versions` keys, in one rule, **every distribution whose code can compute a unit's output: those the reached
code imports and everything they require, transitively, except what only carries bytes to a network or a terminal
or manages packages (`NON_COMPUTING`), plus the optional libraries a reached library runs whenever they are installed
(`USED_WHEN_INSTALLED`)**. So torchvision, reached only through open_clip's preprocessing, counts like open_clip
itself; a newer certifi (a TLS bundle) or rich (console text) re-renders nothing, since no pixel or score can depend
on them; accelerate counts, since diffusers and transformers load every weight through it when it is installed
(`init_empty_weights`, `set_module_tensor_to_device`). A distribution nobody has classified errs towards keying.
`data_hashes` hashes NLTK data by content wherever `NLTK_DATA` finds it. Both are read now, from this process's
`sys.path` and environment.

Reading every distribution's metadata costs a stage's start-up ~0.5 s, so `installed` keeps what it read in
`.cache/cfgen/` under the project, a file per state of the installation (`fingerprint`: the interpreter and every
metadata folder on `sys.path`, in order, with its and its metadata file's modification times): an install, upgrade
or removal, or another path, is another state, read afresh.

`data_hashes` remembers the absolute folder each resource was found in (`nltk_found`): a Dask worker, started
elsewhere without `NLTK_DATA`, is given those folders before its first task (`find_nltk_data`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tasks.core import source
from tasks.core.errors import UserError
from tasks.core.fingerprints import content_hash
from tasks.core.source import ROOT

NON_COMPUTING = frozenset({
    "anyio", "certifi", "charset-normalizer", "h11", "hf-xet", "httpcore", "httpcore2", "httpx", "httpx2", "idna",
    "requests", "truststore", "urllib3",  # HTTP and TLS: the hub, which no unit calls (weights are read from disk)
    "click", "colorama", "markdown-it-py", "mdurl", "pygments", "rich", "shellingham", "tqdm", "typer",  # terminal
    "filelock", "importlib-metadata", "packaging", "setuptools", "zipp",  # finding, describing, locking packages
})
USED_WHEN_INSTALLED = {"diffusers": ("accelerate",), "transformers": ("accelerate",)}


CACHE = source.CACHE / "cfgen"
METADATA_FOLDERS = (".dist-info", ".egg-info")
STATES_KEPT = 8  # processes with other paths (a script's folder, the working folder first) see other states


def _requirements(distribution: importlib.metadata.Distribution) -> list[str]:
    """The distributions it requires when installed without extras (environment markers evaluated here)."""
    found = []
    for line in distribution.requires or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            found.append(requirement.name)
    return found


def fingerprint() -> str:
    """The installation as `importlib.metadata` finds it now: the interpreter, and each `sys.path` folder's metadata
    folders in path order, each with its own and its metadata file's modification time."""
    h = hashlib.blake2b(sys.version.encode(), digest_size=16)
    for folder in sys.path:
        try:
            entries = sorted((e for e in os.scandir(folder or ".") if e.name.endswith(METADATA_FOLDERS)),
                             key=lambda e: e.name)
        except OSError:  # not a folder (a zip), or gone
            continue
        h.update(f"\0{folder}".encode())
        for entry in entries:
            stamps = [os.stat(path).st_mtime_ns for path in (entry.path, *(
                os.path.join(entry.path, name) for name in ("METADATA", "PKG-INFO")
                if os.path.exists(os.path.join(entry.path, name))))]
            h.update(f"\0{entry.name}:{stamps}".encode())
    return h.hexdigest()


def _read_installed() -> dict:
    """{"modules": top-level module -> distribution names (`packages_distributions`), "distributions": canonical
    name -> [name, version, required names] of the one `importlib.metadata.distribution` finds (the first on the
    path)}."""
    distributions: dict[str, list] = {}
    for distribution in importlib.metadata.distributions():
        if (name := distribution.metadata["Name"]) and canonicalize_name(name) not in distributions:
            distributions[canonicalize_name(name)] = [name, distribution.version, _requirements(distribution)]
    return {"modules": importlib.metadata.packages_distributions(), "distributions": distributions}


@cache
def installed(state: str) -> dict:
    """`_read_installed` of the installation in `state` (`fingerprint`), from `CACHE` when an earlier process wrote
    it; written there (atomically; the `STATES_KEPT` latest states are kept) when not. A cache that cannot be read or
    written is read afresh."""
    path = CACHE / f"distributions-{state}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    found = _read_installed()
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=CACHE, prefix=".distributions-", delete=False) as f:
            json.dump(found, f)
        os.replace(f.name, path)
        for stale in sorted(CACHE.glob("distributions-*.json"), key=lambda p: p.stat().st_mtime_ns)[:-STATES_KEPT]:
            stale.unlink(missing_ok=True)
    except OSError:  # a read-only project: read afresh next time
        pass
    return found


def library_versions(top_level: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Distribution name (lower case) -> installed version: (the distributions the module docstring's rule keys for
    code importing the non-stdlib top-level modules `top_level`; those providing `top_level` themselves)."""
    now = installed(fingerprint())
    direct = [d for name in sorted(top_level - set(sys.stdlib_module_names)) for d in now["modules"].get(name, [])]
    roots, todo = {canonicalize_name(d) for d in direct}, list(direct)
    found, imported, seen = {}, {}, set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen or (name in NON_COMPUTING and name not in roots):
            continue
        seen.add(name)
        if (distribution := now["distributions"].get(name)) is None:  # an optional requirement not installed
            continue
        title, version, requires = distribution
        found[title.lower()] = version
        if name in roots:
            imported[title.lower()] = version
        todo.extend([*requires, *USED_WHEN_INSTALLED.get(name, ())])
    return dict(sorted(found.items())), dict(sorted(imported.items()))


_FOUND: dict[str, str] = {}  # NLTK resource -> the absolute folder of NLTK's search path it was found in
NLTK_PACKAGES = ("punkt_tab", "averaged_perceptron_tagger_eng", "wordnet")  # what `make setup` puts in .nltk_data


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
            raise UserError(f"NLTK data {name} not found (NLTK_DATA={os.environ.get('NLTK_DATA', 'unset')}): set "
                            "NLTK_DATA to a folder that holds it (a copy of ../shared/nltk_data), or fetch all three "
                            f"packages once: `python -m nltk.downloader -d {ROOT / '.nltk_data'} "
                            f"{' '.join(NLTK_PACKAGES)}`") from None
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
