"""How a declared stage (`tasks.stages`) runs, the same from its command and from the whole-DAG flow: a data stage's
flow on its input and output, a table stage's flow on `paths`; a sharded one on the engine's task runner. Each
imports its own flow module only."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import Flow

from tasks.core.params import Params
from tasks.stages import Stage, TableStage, load


def run_step(declared: Stage, params: Params, source: Path, output: Path, images: Path | None = None) -> dict:
    """Data stage `declared` on `source`, written to `output` (selection: its winners' PNGs to `images`)."""
    if declared.name == "ingest":
        from flows.text import ingest_task

        return ingest_task.fn(source, output)
    from flows.engine.sharding import task_runner

    runner = task_runner(params)
    if declared.name == "generate":
        from flows.image.generate import generate_flow

        return generate_flow.with_options(task_runner=runner)(source, output, params)
    if declared.name == "selection":
        from flows.image.selection import selection_flow

        return selection_flow.with_options(task_runner=runner)(source, output, images, params)
    from flows.text import stage_flow

    return stage_flow.with_options(task_runner=runner)(declared.name, source, output, params)


def run_table(declared: TableStage, params: Params) -> Any:
    """Table stage `declared` on `params.paths` (a sharded one on the engine's task runner)."""
    work = load(declared.flow)
    if not declared.sharded:
        return work(params)
    from flows.engine.sharding import task_runner

    return work.with_options(task_runner=task_runner(params))(params)


@contextlib.contextmanager
def api_for(declared: Stage | TableStage, params: Params) -> Iterator[None]:
    """What a command runs its stage under: one Prefect API when its work is a flow (the running one, else a
    temporary one), the engine checked first when it is sharded (`preflight.on_engine`)."""
    table = isinstance(declared, TableStage)
    if table and not isinstance(load(declared.flow), Flow):
        yield
        return
    from flows.engine.server import prefect_api
    from flows.preflight import on_engine

    with on_engine(params) if not table or declared.sharded else contextlib.nullcontext(), prefect_api():
        yield
