"""Where a run's results live: the result store every process, host and DVC experiment copy of a project shares.

`result_store(params)` is the one absolute folder every persisted result goes to and is looked up in, fixed on the
submitting side before anything is shipped to a Dask worker (whose working directory is another).

`dvc exp run --queue` / `--temp` runs each experiment in a temporary copy, `<workspace>/.dvc/tmp/exps/<name>/`. DVC
shares its own cache with the workspace; the Prefect result store (shard results, sample records, canonical PNGs) is
shared too: a relative store path (Prefect's default, `<home>/storage` with this project's relative home) resolves
against the workspace, not the copy (`tasks.config.share_result_store`, as every command starts), so a queued
experiment computes only what no run has computed yet.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tasks.config import experiment_workspace
from tasks.core.errors import UserError

if TYPE_CHECKING:
    from tasks.stages import Params

def result_store(params: Params) -> Path:
    """Shard results, sample records, canonical PNGs, fills and evaluation results, all under one absolute folder:
    `engine.result_storage` (relative: to the project, or to the workspace of an experiment's copy), else Prefect's
    local storage setting (this project's `.prefect/storage`)."""
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH

    configured = params.engine.result_storage
    if configured is None:
        return Path(PREFECT_RESULTS_LOCAL_STORAGE_PATH.value()).expanduser().resolve()
    if "://" in configured:
        raise UserError(f"engine.result_storage: {configured} is a URL; give a path every worker sees (a shared "
                        "filesystem, or the bucket mounted with s3fs/gcsfuse): sample records are locked files")
    path = Path(configured).expanduser()
    return path if path.is_absolute() else (experiment_workspace(params.root) or params.root) / path
