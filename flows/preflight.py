"""What a command checks before it starts work with models (and any server): its models on this machine (as `cfgen
plan` checks) and the engine its flows go through. A stage without models never imports it."""

from __future__ import annotations

import contextlib
from typing import Any

from tasks.core.errors import UserError
from tasks.core.io import check_folder
from tasks.stages import Params


def check_models(*sections: Any) -> None:
    """Every model of the params sections is on this machine, before any is loaded: a missing folder, or a hub model
    not in the cache at its pinned revision, is one line naming the command that fetches it; a local folder without
    the processor config its loader reads first, one line naming the folder."""
    from tasks.core.fingerprints import model_fingerprints
    from tasks.plan.preflight import incomplete, missing

    if absent := [line for section in sections for line in missing(section)]:
        raise UserError(f"these models are not on this machine: {'; '.join(absent)}")
    for section in sections:
        model_fingerprints(section)
    if lacking := [line for section in sections for line in incomplete(section)]:
        raise UserError("; ".join(lacking))


def check_run_models(params: Params) -> None:
    """`check_models` before a whole run (`cfgen run`, `cfgen serve`) over every section with a model it loads
    (`Params.running_models`); the demo profile's are built by its first stage, so nothing is looked for there."""
    from tasks.plan.preflight import running_sections

    if params.profile != "demo":
        check_models(*running_sections(params))


def on_engine(params: Params) -> contextlib.AbstractContextManager:
    """The engine a run's flows go through, checked before the Prefect API starts (no server for a dead address):
    PREFECT_HOME and the result store can take files (else one line: a run that persists nothing would recompute it
    all after a kill); with `engine.dask_address`, its scheduler answers now (else one line) and a scheduler lost
    mid-run becomes one line (`flows.engine.cluster`)."""
    from flows.engine.server import check_home
    from flows.engine.workspace import result_store

    check_home()
    check_folder(result_store(params))
    if not params.engine.dask_address:
        return contextlib.nullcontext()
    from flows.engine.cluster import check_scheduler, scheduler_loss_is_one_line

    check_scheduler(params.engine.dask_address)
    return scheduler_loss_is_one_line(params.engine.dask_address)
