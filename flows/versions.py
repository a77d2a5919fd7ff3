"""Dataset versions at git revisions or DVC experiments, read through `dvc.api`, and their diff reports."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import polars as pl
import yaml
from dvc.api import read
from dvc.exceptions import OutputNotFoundError, PathMissingError
from dvc.repo import Repo
from dvc.repo.experiments.utils import resolve_name
from scmrepo.exceptions import SCMError
from scmrepo.git import Git

from tasks.core.errors import UserError
from tasks.core.params import PathsParams
from tasks.core.writing import json_text, write_text
from tasks.release import diff, gallery


def resolve(rev: str, repo: Path = Path(".")) -> str:
    """A git revision as given, or the full ref of a DVC experiment name (an empty one is neither: git would read it
    as HEAD, and the report's name would lose a side)."""
    if not rev.strip():
        raise UserError(f"{rev!r}: name a git revision or a DVC experiment")
    scm = Git(str(repo))
    with contextlib.suppress(SCMError):
        scm.resolve_rev(rev)
        return rev
    with contextlib.suppress(SCMError):  # an empty repo has no experiments either
        if (ref := resolve_name(scm, rev).get(rev)) is not None:
            return str(ref)
    raise UserError(f"{rev!r} is neither a git revision nor a DVC experiment in {repo}")


def locked(path: Path, rev: str, repo: Path) -> bool:
    """Whether `rev`'s `dvc.lock` names `path` as a stage output (or an output folder holding it)."""
    try:
        lock = yaml.safe_load(Git(str(repo)).get_fs(rev).open("dvc.lock", mode="r").read()) or {}
    except FileNotFoundError:
        return False
    target = PurePosixPath(path.as_posix())
    outs = [PurePosixPath(out["path"]) for stage in lock.get("stages", {}).values() for out in stage.get("outs", [])]
    return any(out == target or out in target.parents for out in outs)


def default_remote(repo: Path) -> str | None:
    """`NAME (URL)` of the project's default DVC remote, or None when it has none."""
    with Repo(str(repo)) as project:
        name = project.config["core"].get("remote")
        return f"{name} ({project.config['remote'][name]['url']})" if name in project.config["remote"] else None


def load_version(rev: str, paths: PathsParams, repo: Path = Path(".")) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """(counterfactual captions, selected pairs, run metrics) as of `rev`."""
    full = resolve(rev, repo)

    def at_rev(path: Path) -> bytes:
        try:
            return read(str(path), repo=str(repo), rev=full, mode="rb")
        except (FileNotFoundError, PathMissingError, OutputNotFoundError):
            if not locked(path, full, repo):
                raise UserError(f"{path} is not in revision {rev}: run the pipeline there (`dvc repro`) and commit "
                                "dvc.lock, or push its outputs to the DVC remote") from None
            if remote := default_remote(repo):
                raise UserError(f"{path} of revision {rev} is neither in this DVC cache nor on the DVC remote "
                                f"{remote} (its dvc.lock names it): `dvc push` it where it was made, or `dvc repro` "
                                f"at {rev}") from None
            raise UserError(f"{path} of revision {rev} is not in this DVC cache (its dvc.lock names it) and the "
                            f"project has no DVC remote: `dvc pull` it from one, or `dvc repro` at {rev}") from None

    metrics = json.loads(at_rev(paths.run_metrics))
    return (pl.read_parquet(io.BytesIO(at_rev(paths.counterfactual_captions))),
            pl.read_parquet(io.BytesIO(at_rev(paths.selected))), metrics)


def selected_image(rev: str, paths: PathsParams, repo: Path = Path(".")) -> Callable[[str], bytes]:
    """A selected PNG's bytes as of `rev`, by its path in the selection's image folder."""
    full = resolve(rev, repo)
    return lambda relative: read(str(paths.selected_images / relative), repo=str(repo), rev=full, mode="rb")


def write_diff(rev_a: str, rev_b: str, paths: PathsParams, repo: Path = Path(".")) -> dict[str, Path]:
    """`reports/diff/<a>..<b>.md`, `.html`, `.json` comparing the two versions, and `<a>..<b>/`, a gallery of the
    pairs they do not share (each version's card of it); returns their paths."""
    for rev in (rev_a, rev_b):
        resolve(rev, repo)  # both named before either is read
    version_a, version_b = load_version(rev_a, paths, repo), load_version(rev_b, paths, repo)
    result = diff.diff_versions(version_a, version_b)
    out = paths.diff
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{rev_a}..{rev_b}".replace("/", "_")
    written = {"md": out / f"{stem}.md", "html": out / f"{stem}.html", "json": out / f"{stem}.json",
               "gallery": out / stem / "index.html"}
    gallery.compare(out / stem, f"{rev_a} → {rev_b}: the pairs they do not share",  # first: it checks the names
                    {rev: (*version[:2], selected_image(rev, paths, repo))
                     for rev, version in ((rev_a, version_a), (rev_b, version_b))},
                    diff.pair_changes(version_a, version_b))
    write_text(written["md"], diff.to_markdown(result, rev_a, rev_b))
    write_text(written["html"], diff.to_html(result, rev_a, rev_b))
    write_text(written["json"], json_text(result, indent=2, default=str))
    return written
