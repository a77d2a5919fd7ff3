"""Where a DVC experiment's copy of the repository finds the workspace's caches.

`dvc exp run --queue` / `--temp` runs each experiment in a temporary copy, `<workspace>/.dvc/tmp/exps/<name>/`. DVC
shares its own cache with the workspace; the Prefect result store (shard results, sample records, canonical PNGs) is
shared too: a relative store path (Prefect's default, `<home>/storage` with this project's relative home) resolves
against the workspace, not the copy, so a queued experiment computes only what no run has computed yet.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

EXPERIMENTS = (".dvc", "tmp", "exps")


def experiment_workspace(path: Path) -> Path | None:
    """The workspace whose temporary experiment copy holds `path`, or None."""
    parts = path.parts
    starts = [i for i in range(len(parts) - len(EXPERIMENTS)) if parts[i:i + len(EXPERIMENTS)] == EXPERIMENTS]
    return Path(*parts[:starts[-1]]) if starts else None


def share_result_store(cwd: Path) -> None:
    """Point a relative Prefect result store at the workspace's when `cwd` is an experiment's copy (before Prefect
    reads its settings)."""
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
